"""Shared prefixes, one request at a time: every prefix once cold (its first request, never seen by the
server), then ``warm_rounds`` passes over them warm. A pause of :data:`PHASE_PAUSE_S` comes before the first
cold request and before the first warm one, longer than a scrape interval, so that a scrape of the server's
prefix-cache counters falls before each phase and each phase has its own hit rate.
"""

from __future__ import annotations

from cardgen.kinds.prefix.schema import PrefixParams
from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome

PHASE_PAUSE_S = 1.0


class PrefixProgram(Program):
    kind = "prefix"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(PrefixParams)
        self.order = self.prefix_order()

    def prefix_order(self) -> list[tuple[int, str]]:
        """``(prefix, phase)`` of each request, in the order they are sent."""
        params = self.params
        cold = [(k, "cold") for k in range(params.prefixes)]
        return cold + [(k, "warm") for _ in range(params.warm_rounds) for k in range(params.prefixes)]

    def pause_before(self, n: int) -> float:
        """Seconds to wait before request ``n`` of :meth:`prefix_order`."""
        return PHASE_PAUSE_S if n in (0, self.params.prefixes) else 0.0

    def start(self) -> list[Command]:
        return self._next(0.0)

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        return self._next(now)

    def _next(self, now: float) -> list[Command]:
        n = self.issued
        if n >= len(self.order):
            return self.finish()
        prefix, phase = self.order[n]
        pause = self.pause_before(n)
        return [self.item(prefix, slot=0, at=now + pause if pause else None, prefix=prefix, phase=phase, parallel=1)]
