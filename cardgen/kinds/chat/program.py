"""Multi-turn chat: ``parallel`` users hold ``conversations`` conversations of ``turns`` turns, each user its
own one after another (round robin). A turn sends the conversation so far, the model's own replies included, and
a new message (``prompt_tokens`` long for the first, ``message_tokens`` after), then the user thinks
``think_time_s`` before the next turn. A conversation whose turn failed ends there: it cannot go on without its
reply. What a turn sends is :class:`cardgen.kinds.history.Conversations`' rule, kept by both interpreters; the messages themselves (their
text, or their token counts in virtual time) are the interpreter's.
"""

from __future__ import annotations

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


def fresh_history(point: PointView) -> bool:
    """Whether ``point`` is a chat point whose every turn's history starts with a new id (``ChatParams``); False
    for the other kinds (they hold no conversation)."""
    return isinstance(point.params, ChatParams) and point.params.fresh_history
