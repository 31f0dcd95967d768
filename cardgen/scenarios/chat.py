"""Multi-turn chat: ``parallel`` users hold ``conversations`` conversations of ``turns`` turns, each user its
own one after another (round robin). A turn sends the conversation so far, the model's own replies included, and
a new message (``prompt_tokens`` long for the first, ``message_tokens`` after), then the user thinks
``think_time_s`` before the next turn. A conversation whose turn failed ends there: it cannot go on without its
reply. The history itself (its text, or its tokens in virtual time) is the interpreter's to keep.
"""

from __future__ import annotations

from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.scenarios.program import Command, Program, Send


class ChatProgram(Program):
    kind = "chat"

    def __init__(self, point: Point, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.todo = {user: self.conversations(user) for user in range(point.parallel or 1)}

    def conversations(self, user: int) -> list[int]:
        """The conversations user ``user`` holds, one after another (round robin)."""
        return list(range(user, self.point.conversations, self.point.parallel or 1))

    def message_tokens(self, turn: int) -> int:
        """The length of the message turn ``turn`` (1, 2 ...) adds."""
        return self.point.prompt_tokens if turn == 1 else self.point.message_tokens

    def start(self) -> list[Command]:
        return [cmd for user in self.todo for cmd in self._next_conversation(user, 0.0)]

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        user, turn = send.slot or 0, send.turn or 1
        if not outcome.ok or turn >= self.point.turns:
            return self._next_conversation(user, now)
        think = self.point.think_time_s
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
