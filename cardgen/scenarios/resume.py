"""Resuming a run: which runs may be continued, and what a resumed run does, for either clock.

A resumed run is the same run continued, not a new one: the points that ended are not sent again; the point
that was cut off runs again as its next ``attempt`` (its earlier records stay on disk, superseded); the points
never reached run as planned. The load engine (``cardgen.load.resume``) and the virtual-time driver
(``cardgen.sim.modelled``) both continue a run by :func:`resume_plan`, and the controller runs what it leaves.

Only the rule is here: reading run.json, marking a dead writer's run, and saying no to a person are the run
writer's (:mod:`cardgen.runwriter`), which gives these functions what they decide on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cardgen.points import Point
from cardgen.schemas.run import COMPLETE, RUNNING, PointOutcome, RunInfo

#: why a run may not be resumed: its writer is still there, it is complete, or it did not record its points
Refusal = Literal["running", "complete", "unrecorded"]


def refusal(info: RunInfo, status: str) -> Refusal | None:
    """Why the run whose run.json is ``info`` and whose effective status is ``status`` may not be resumed; None
    when it may."""
    if status == RUNNING:
        return "running"
    if status == COMPLETE:
        return "complete"
    if not info.points:
        return "unrecorded"
    return None


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run does: run.json's points as it starts (the cut-off one as its next attempt), the points
    it runs, and each point's attempt."""

    outcomes: list[PointOutcome]
    to_run: list[Point]
    rerun: list[PointOutcome]  # the cut-off points, as the attempts that run now
    done: int  # points that had ended, not sent again
    unknown: tuple[str, ...] = ()  # points run.json names that the suite and server did not plan (sorted)

    @property
    def attempts(self) -> dict[str, int]:
        return {o.name: o.attempt for o in self.outcomes}


def resume_plan(info: RunInfo, points: Sequence[Point]) -> ResumePlan:
    """How to continue the run whose run.json is ``info``, whose suite and server planned ``points``: the points
    that did not end, the cut-off one as its next attempt. A point run.json names that ``points`` do not is in
    the plan's ``unknown``: such a run cannot be continued by this plan."""
    recorded = {o.name: o for o in info.points}
    unknown = tuple(sorted(set(recorded) - {p.name for p in points}))
    outcomes, to_run, rerun = [], [], []
    for point in points:
        outcome = recorded.get(point.name) or PointOutcome(name=point.name, kind=point.kind)
        if not outcome.ended:
            if outcome.started_unix is not None:  # cut off: run it again, its records so far superseded
                outcome = PointOutcome(name=point.name, kind=point.kind, attempt=outcome.attempt + 1)
                rerun.append(outcome)
            to_run.append(point)
        outcomes.append(outcome)
    return ResumePlan(outcomes=outcomes, to_run=to_run, rerun=rerun, done=len(points) - len(to_run), unknown=unknown)
