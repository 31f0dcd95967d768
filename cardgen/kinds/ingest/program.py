"""Ingestion: prompts of growing lengths, one at a time, each with ``output_tokens`` (1 by default): TTFT
against prompt tokens, whose robust line's slope is the card's prompt ingestion speed.

A sweep sends every length once, in order; ``repeats`` sweeps at most. With a ``target_ci``, after each whole
sweep the sweep stops once the slope's interval (``cardgen.precision.ingest_interval``, over the points the
card's line keeps) is within it.
"""

from __future__ import annotations

from cardgen.kinds.ingest.schema import IngestParams
from cardgen.kinds.program import Command, Program, Send, counted, interval_words
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.precision import ingest_interval, within_target
from cardgen.stops import STOP_COMPLETE, STOP_PRECISION


class IngestProgram(Program):
    kind = "ingest"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(IngestParams)
        self.order = self.ingest_order()
        self.records: list[Outcome] = []

    def ingest_order(self) -> list[tuple[int, int]]:
        """``(prompt_tokens, repeat)`` of each request, in the order they are sent (a point with a
        ``target_ci`` may end after any whole sweep)."""
        return [(length, rep) for rep in range(self.params.repeats) for length in self.params.lengths]

    def start(self) -> list[Command]:
        return self._next()

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        self.records.append(outcome)
        params = self.params
        sweep = len(params.lengths)
        if params.target_ci is not None and sweep and self.issued % sweep == 0:
            sweeps = self.issued // sweep
            interval = ingest_interval(self.records)
            precise = within_target(interval, params.target_ci, positive=True)
            self.detail = interval_words("the slope", interval, params.target_ci, counted(sweeps, "sweep"))
            if not self.more_sweeps(sweeps, precise=precise):
                return self.finish(STOP_PRECISION if precise else STOP_COMPLETE, self.detail)
        return self._next()

    def more_sweeps(self, sweeps: int, *, precise: bool) -> bool:
        """Whether another sweep follows ``sweeps`` whole ones: ``repeats`` at most; with a ``target_ci``, none
        once the slope is ``precise``."""
        if sweeps >= self.params.repeats:
            return False
        return sweeps == 0 or self.params.target_ci is None or not precise

    def _next(self) -> list[Command]:
        if self.issued >= len(self.order):
            return self.finish(STOP_COMPLETE, self.detail)
        length, repeat = self.order[self.issued]
        return [self.send(slot=0, prompt_tokens=length, repeat=repeat, parallel=1)]
