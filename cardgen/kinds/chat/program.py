"""Multi-turn chat: ``parallel`` users hold ``conversations`` conversations of ``turns`` turns, each user its
own one after another (round robin). A turn sends the conversation so far, the model's own replies included, and
a new message (``prompt_tokens`` long for the first, ``message_tokens`` after), then the user thinks
``think_time_s`` before the next turn. A conversation whose turn failed ends there: it cannot go on without its
reply. What a turn sends is :class:`Conversations`' rule, kept by both interpreters; the messages themselves (their
text, or their token counts in virtual time) are the interpreter's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from cardgen.kinds.chat.schema import ChatParams
from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome


class ChatProgram(Program):
    kind = "chat"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(ChatParams)
        self.todo = {user: self.conversations(user) for user in range(point.parallel or 1)}

    def conversations(self, user: int) -> list[int]:
        """The conversations user ``user`` holds, one after another (round robin)."""
        return list(range(user, self.params.conversations, self.point.parallel or 1))

    def message_tokens(self, turn: int) -> int:
        """The length of the message turn ``turn`` (1, 2 ...) adds."""
        return self.point.prompt_tokens if turn == 1 else self.params.message_tokens

    def start(self) -> list[Command]:
        return [cmd for user in self.todo for cmd in self._next_conversation(user, 0.0)]

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        user, turn = send.slot or 0, send.turn or 1
        if not outcome.ok or turn >= self.params.turns:
            return self._next_conversation(user, now)
        think = self.params.think_time_s
        return [self._turn(user, send.conversation or 0, turn + 1, at=now + think if think else None)]

    def _next_conversation(self, user: int, now: float) -> list[Command]:
        todo = self.todo[user]
        if not todo:
            if not any(self.todo.values()):
                self.finish()
            return []
        return [self._turn(user, todo.pop(0), 1, at=None)]

    def _turn(self, user: int, conversation: int, turn: int, *, at: float | None) -> Send:
        return self.send(slot=user, at=at, prompt_tokens=self.message_tokens(turn), conversation=conversation,
                         turn=turn, parallel=self.point.parallel)


M = TypeVar("M")


def fresh_history(point: PointView) -> bool:
    """Whether ``point`` is a chat point whose every turn's history starts with a new id (``ChatParams``); False
    for the other kinds (they hold no conversation)."""
    return isinstance(point.params, ChatParams) and point.params.fresh_history


class Conversations(Generic[M]):
    """Each conversation's history, by one rule for both interpreters (messages of any type ``M``: text in real
    time, token counts in virtual time):

    - a first turn has no history; a later turn's is what its conversation's earlier turns asked and were
      answered;
    - a turn that failed adds nothing (its conversation ends: :class:`ChatProgram`);
    - with ``fresh`` (:func:`fresh_history`) the history's first message is renewed every later turn (``renew``: a
      new request id at its head), so the server has no prefix to reuse.

    A conversation has one turn under way at a time (its turns follow each other)."""

    def __init__(self, *, fresh: bool) -> None:
        self.fresh = fresh
        self._said: dict[int, list[M]] = {}  # conversation -> its messages so far
        self._asking: dict[int, list[M]] = {}  # conversation -> the messages its turn under way sent

    def ask(self, send: Send, message: M, *, renew: Callable[[M], M]) -> list[M]:
        """The messages turn ``send`` sends: its conversation so far and ``message``."""
        conversation = send.conversation or 0
        history = self._said.get(conversation, []) if (send.turn or 1) > 1 else []
        if self.fresh and history:
            history = [renew(history[0]), *history[1:]]
        self._asking[conversation] = asked = [*history, message]
        return asked

    def answered(self, send: Send, reply: M | None) -> None:
        """Turn ``send`` ended: with the model's ``reply`` (it goes on the history), or None when it failed."""
        asked = self._asking.pop(send.conversation or 0, None)
        if reply is not None and asked is not None:
            self._said[send.conversation or 0] = [*asked, reply]
