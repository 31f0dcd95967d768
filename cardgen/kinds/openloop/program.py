"""The open loop: requests arrive by a Poisson process at ``rate_rps``, whatever the server does (all at once
for an infinite rate); or, for a dataset, the dataset's sampled requests at those times; or, for a replayed
trace, the trace's requests at its own offsets (divided by its ``speedup``).

Spread over several load-generating processes, each process sends every ``parts``-th request (round robin) at
``rate_rps / parts``, by a Poisson process of its own, seeded by the point's seed and its index.
"""

from __future__ import annotations

import math
import random
from typing import Any

from cardgen.kinds.openloop.schema import OpenParams
from cardgen.kinds.program import Command, Program, share
from cardgen.kinds.view import PointView


class OpenProgram(Program):
    kind = "open"
    barrier = False

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(OpenParams)

    def start(self) -> list[Command]:
        point = self.point
        sends: list[Command] = []
        for number, at in zip(self.request_numbers(), self.arrival_offsets(), strict=True):
            fields: dict[str, Any] = {"at": at, "scheduled": True, "rate_rps": point.rate_rps}
            sends.append(self.item(number, **fields) if point.dataset is not None else self.send(**fields))
        self.finish()
        return sends

    def request_numbers(self) -> list[int]:
        """Which of the point's requests (0 .. num_requests - 1) this process sends, in the order of its
        :meth:`arrival_offsets` (round robin)."""
        return list(range(self.index, self.params.num_requests, self.parts))

    def arrival_offsets(self) -> list[float]:
        """When this process sends each of its requests, in seconds after the point's start: exponential gaps
        at ``rate_rps / parts``, seeded per process; all at 0 for an infinite rate; a replayed trace's own
        offsets divided by its ``speedup``."""
        point, params = self.point, self.params
        if params.replay:
            return [params.offsets[n] / params.speedup for n in self.request_numbers()]
        n = share(params.num_requests, self.index, self.parts)
        rate = (point.rate_rps or math.inf) / self.parts
        if math.isinf(rate):
            return [0.0] * n
        rng = random.Random(params.seed * 1000 + self.index)
        t, out = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rate)
            out.append(t)
        return out
