"""Constrained and free requests in alternating rounds at one parallel count.

A warm-up pair first, one request at a time: a constrained request (the server compiles the schema's grammar
for it: its TTFT is kept apart) then a free one. Then ``rounds`` pairs of rounds, each round ``parallel`` requests
sent at once and waited for: the constrained round first in even pairs and the free round first in odd ones
(ABBA), so that a drift of the server's speed over the point falls on both arms alike. Every request has the
point's prompt length (its own text, so neither arm gets the other's prefix-cache hits) and output length.

A point whose constrained warm-up request fails stops there (the server refuses the fields, or answers them
badly: the analysis says which, from the record); so does one whose constrained round all failed.
"""

from __future__ import annotations

from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.stops import STOP_COMPLETE, STOP_SKIPPED

CONSTRAINED, FREE = "constrained", "free"
ARMS = (CONSTRAINED, FREE)


def round_plan(rounds: int) -> list[str]:
    """The arm of each round after the warm-up pair, in order (ABBA: constrained first in even pairs)."""
    plan: list[str] = []
    for k in range(rounds):
        plan += [CONSTRAINED, FREE] if k % 2 == 0 else [FREE, CONSTRAINED]
    return plan


class StructuredProgram(Program):
    kind = "structured"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(StructuredParams)
        self.users = point.parallel or 1
        self.plan = round_plan(self.params.rounds)
        self.round = -3  # -2, -1 once sent: the warm-up pair (constrained, free); then the plan's rounds
        self.pending = 0
        self.failed = 0  # requests of the round in flight that failed

    def start(self) -> list[Command]:
        if self.params.mode == "tools" and self.point.endpoint != "chat":
            return self.finish(STOP_SKIPPED, "not run: tool calls need the chat endpoint")
        return self._warmup(CONSTRAINED)

    def arm(self) -> str:
        """The arm of the round in flight."""
        return (CONSTRAINED, FREE)[self.round + 2] if self.round < 0 else self.plan[self.round]

    def _warmup(self, arm: str) -> list[Command]:
        self.round += 1
        self.pending, self.failed = 1, 0
        return [self._send(arm, slot=0, parallel=1, warmup=True)]

    def _send(self, arm: str, *, slot: int, parallel: int, warmup: bool = False) -> Send:
        # a constrained answer's length is its grammar's: forced past its end, a grammar that closed its JSON has
        # nothing left to allow, and the server writes free text after it
        return self.send(slot=slot, parallel=parallel, warmup=warmup, phase=arm, length_forced=arm != CONSTRAINED,
                         repeat=None if warmup else self.round, extra={"constrained": arm == CONSTRAINED})

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        self.pending -= 1
        self.failed += 0 if outcome.ok else 1
        if self.pending > 0:
            return []
        arm, failed_all = self.arm(), self.failed > 0 and self.failed == (1 if self.round < 0 else self.users)
        if arm == CONSTRAINED and failed_all:
            what = "warm-up request" if self.round < 0 else f"round {self.round + 1}'s requests"
            return self.finish(STOP_COMPLETE, f"stopped: the constrained {what} failed (see the card)")
        if self.round == -2:
            return self._warmup(FREE)
        self.round += 1
        if self.round >= len(self.plan):
            return self.finish()
        self.pending, self.failed = self.users, 0
        return [self._send(self.arm(), slot=i, parallel=self.users) for i in range(self.users)]
