"""What an ``outsweep`` point sends: each output length once per sweep, one request at a time, shortest first."""

from __future__ import annotations

from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.stops import STOP_COMPLETE
from cardgen_outsweep.schema import OutSweepParams


class OutSweepProgram(Program):
    kind = "outsweep"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        params = point.params_as(OutSweepParams)
        self.order = [(n, rep) for rep in range(params.repeats) for n in params.lengths]

    def start(self) -> list[Command]:
        return self._next()

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        return self._next()

    def _next(self) -> list[Command]:
        if self.issued >= len(self.order):
            return self.finish(STOP_COMPLETE)
        output_tokens, repeat = self.order[self.issued]
        return [self.send(slot=0, output_tokens=output_tokens, repeat=repeat, parallel=1)]
