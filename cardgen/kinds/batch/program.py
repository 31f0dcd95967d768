"""The batch table (TGI's): rounds of ``parallel`` requests sent at once, each round when the last has ended;
``warmups`` rounds first (kept on disk, left out of the figures), then ``runs`` measured ones. With a
``target_ci``, measured rounds go on after those until the mean decode speed of a round is known within it
(``cardgen.precision.mean_interval``: rounds are independent repeats), ``max_runs`` at most.
"""

from __future__ import annotations

import math

from cardgen.kinds.batch.schema import BatchParams
from cardgen.kinds.program import Command, Program, Send, counted, interval_words
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.precision import mean_interval, round_decode_speed, within_target
from cardgen.stops import STOP_COMPLETE, STOP_PRECISION


class BatchProgram(Program):
    kind = "batch"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(BatchParams)
        self.size = point.parallel or 1
        self.planned = self.batch_rounds()
        self.rounds = 0  # rounds sent
        self.speeds: list[float] = []  # each measured round's mean decode speed
        self._round: list[Outcome] = []

    def batch_rounds(self) -> list[tuple[int, bool]]:
        """``(repeat, warmup)`` of each planned round: warm-up rounds count 0, 1 ... and so do the measured ones
        after them (a point with a ``target_ci`` may add rounds: :meth:`more_rounds`)."""
        params = self.params
        return [(run if run < params.warmups else run - params.warmups, run < params.warmups)
                for run in range(params.warmups + params.runs)]

    def more_rounds(self, measured: int, *, precise: bool) -> bool:
        """Whether another measured round follows ``measured`` of them: until ``runs``; with a ``target_ci``,
        then on until the round means are ``precise``, ``max_runs`` at most."""
        params = self.params
        if measured < params.runs:
            return True
        if params.target_ci is None or precise:
            return False
        return measured < (params.max_runs or params.runs)

    def start(self) -> list[Command]:
        return self._round_of(*self.planned[0]) if self.planned else self.finish()

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        self._round.append(outcome)
        if len(self._round) < self.size:
            return []
        if not send.warmup:
            speed = round_decode_speed(self._round)
            self.speeds.append(math.nan if speed is None else speed)
        self._round = []
        if self.rounds < len(self.planned):
            return self._round_of(*self.planned[self.rounds])
        target = self.params.target_ci
        if target is None:
            return self.finish(STOP_COMPLETE)
        interval = mean_interval(self.speeds)
        precise = within_target(interval, target)
        self.detail = interval_words("the mean decode speed", interval, target, counted(len(self.speeds), "round"))
        if not self.more_rounds(len(self.speeds), precise=precise):
            return self.finish(STOP_PRECISION if precise else STOP_COMPLETE, self.detail)
        return self._round_of(len(self.speeds), False)

    def _round_of(self, repeat: int, warmup: bool) -> list[Command]:
        self.rounds += 1
        return [self.send(slot=seat, repeat=repeat, warmup=warmup, parallel=self.size) for seat in range(self.size)]
