"""The closed loop: ``parallel`` users, each sending its next request the moment its last one ends.

A point's users may be spread over several load-generating processes (:func:`share`): each runs its share of
the users, of the minimum and of the cap. A user sends again until the point has run its minimum
(``min_requests`` and ``min_duration_s``); after that, a point with a ``target_ci`` goes on until its figures
are precise, one without stops. ``max_requests`` and ``max_duration_s`` stop it whatever the precision.

Precision is judged where every process's records meet (:class:`ClosedJudge`): the median speed from start and
the median TTFT of the point's steady requests, each within ``target_ci`` (:mod:`cardgen.precision`), checked
once a round (``parallel`` records) after ``min_requests``.
"""

from __future__ import annotations

from cardgen.kinds.closed.schema import ClosedParams
from cardgen.kinds.program import Command, Judge, Program, Send, share
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome
from cardgen.precision import ClosedColumns, median_interval, precision_reached
from cardgen.stops import STOP_MAX_DURATION, STOP_MAX_REQUESTS, STOP_MINIMUM, STOP_PRECISION


class ClosedProgram(Program):
    kind = "closed"
    barrier = False

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = params = point.params_as(ClosedParams)
        users = point.parallel or 1
        self.users = share(users, index, parts)
        active = min(users, parts)  # the processes that have users share the minimum and the cap
        self.quota = share(params.min_requests, index, active) if index < active else 0
        self.cap = None
        if params.max_requests is not None:
            self.cap = share(params.max_requests, index, active) if index < active else 0
        self.precise = False

    def start(self) -> list[Command]:
        return [cmd for slot in range(self.users) for cmd in self._next(slot, 0.0)]

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        return self._next(send.slot or 0, now)

    def told_precise(self) -> None:
        self.precise = True

    def _next(self, slot: int, now: float) -> list[Command]:
        """User ``slot`` is free at ``now``: its next request, or nothing (the first user to stop says why)."""
        if self.continues(now):
            return [self.send(slot=slot, parallel=self.point.parallel)]
        return self.finish(*self.why_stopped(now))

    def continues(self, now: float) -> bool:
        """Whether a user sends another request ``now`` seconds after the point started. Past
        ``max_duration_s`` or the cap never; before the quota and ``min_duration_s`` always; after them, a point
        with a ``target_ci`` until it is precise, one without not."""
        params = self.params
        if self.stop is not None:
            return False
        if params.max_duration_s is not None and now >= params.max_duration_s:
            return False
        if self.cap is not None and self.issued >= self.cap:
            return False
        if self.issued < self.quota or now < params.min_duration_s:
            return True
        return params.target_ci is not None and not self.precise

    def why_stopped(self, now: float) -> tuple[str, None]:
        """Why the point stopped sending, once :meth:`continues` said no, in its own order (the words are the
        judge's: they need every process's records)."""
        params = self.params
        if params.max_duration_s is not None and now >= params.max_duration_s:
            return STOP_MAX_DURATION, None
        if self.cap is not None and self.issued >= self.cap:
            return STOP_MAX_REQUESTS, None
        if self.precise and params.target_ci is not None:
            return STOP_PRECISION, None
        return STOP_MINIMUM, None


class ClosedJudge(Judge):
    """Every process's records of a closed-loop point: precise once its median speed from start and median
    TTFT are within ``target_ci``, judged once a round after ``min_requests`` and ``min_duration_s``; the
    intervals are the words of its stop."""

    def __init__(self, point: PointView) -> None:
        super().__init__(point)
        self.params = point.params_as(ClosedParams)
        self.precise = False
        self.evidence: str | None = None  # the intervals when the point was found precise
        self._checked_at = 0
        self.figures = ClosedColumns()  # what the precision reads of each record (kept only with a target_ci)

    def record(self, rec: Outcome, now: float) -> bool:
        super().record(rec, now)
        params = self.params
        if params.target_ci is not None:
            self.figures.add(rec)
        if (params.target_ci is None or self.precise or self.requests < params.min_requests
                or self.requests - self._checked_at < self.parallel or now < params.min_duration_s):
            return False
        self._checked_at = self.requests
        if precision_reached(self.figures.figures(parallel=self.parallel), target=params.target_ci,
                             parallel=self.parallel):
            self.precise = True
            self.evidence = self._intervals(params.target_ci)
        return self.precise

    def detail(self, stop: str, said: str | None) -> str:
        params = self.params
        if params.target_ci is None:
            if stop == STOP_MINIMUM:
                return f"min_requests {params.min_requests}" + (
                    f" and min_duration_s {params.min_duration_s:g}" if params.min_duration_s else "") + " reached"
            return self._cap_words(stop)
        if stop == STOP_PRECISION and self.evidence is not None:
            return self.evidence
        return f"{self._cap_words(stop)} first: {self._intervals(params.target_ci)}"

    def _cap_words(self, stop: str) -> str:
        if stop == STOP_MAX_DURATION:
            return f"max_duration_s {self.params.max_duration_s:g} reached"
        if stop == STOP_MAX_REQUESTS:
            return f"max_requests {self.params.max_requests} reached"
        return stop

    def _intervals(self, target_ci: float) -> str:
        speeds, ttfts = self.figures.figures(parallel=self.parallel)
        parts = []
        for name, values in (("speed from start", speeds), ("TTFT", ttfts)):
            interval = median_interval(values, parallel=self.parallel)
            parts.append(f"{name} +-{interval.relative:.1%}" if interval is not None else f"{name} not yet known")
        return (f"{', '.join(parts)} over {len(speeds)} steady requests of {self.requests} "
                f"(target +-{target_ci * 100:g}%)")
