"""Resuming a run: which runs may be continued, and what a resumed run does, for either clock.

A resumed run is the same run continued, not a new one: the points that ended are not sent again; the point
that was cut off runs again as its next ``attempt`` (its earlier records stay on disk, superseded); the points
never reached run as planned. The load engine (``cardgen.load.resume``) and the virtual-time driver
(``cardgen.sim.modelled``) both continue a run by :func:`resume_plan`, and the controller runs what it leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from cardgen.errors import UsageError
from cardgen.points import Point
from cardgen.rundir import RunDir, effective_status, status_words
from cardgen.schemas.run import COMPLETE, RUNNING, PointOutcome, RunInfo
from cardgen.suite import Suite


def check_resumable(run_dir: Path) -> RunInfo:
    """run.json of a run ``cardgen resume`` may continue; a one-line UsageError for one it may not (complete,
    still running, or written before runs recorded their points). A ``running`` run whose writer is gone is
    marked ``died`` on disk first (:meth:`RunDir.mark_died`). Returns run.json with its effective status."""
    files = RunDir(run_dir)
    info = files.mark_died()
    status = effective_status(info)
    if status == RUNNING:
        raise UsageError(f"{run_dir} is still running (pid {info.pid} on {info.hostname}): let it end, or stop it "
                         "before resuming it")
    if status == COMPLETE:
        raise UsageError(f"{run_dir} is complete: nothing to resume (its card: cardgen render {run_dir})")
    if not info.points:
        raise UsageError(f"{run_dir} was written by a cardgen that did not record which points finished: it "
                         "cannot be resumed; measure again with cardgen build")
    return info.model_copy(update={"status": status})


def suite_of(info: RunInfo) -> Suite:
    """The suite a run was measured with, from run.json's ``suite_spec``."""
    try:
        return Suite.model_validate(info.suite_spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "suite"
        raise UsageError(f"run.json's suite_spec is not a suite this cardgen reads ({where}: {first['msg']}): "
                         "resume it with the cardgen that started it") from None


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run does: run.json's points as it starts (the cut-off one as its next attempt), the points
    it runs, and each point's attempt."""

    outcomes: list[PointOutcome]
    to_run: list[Point]
    rerun: list[PointOutcome]  # the cut-off points, as the attempts that run now
    done: int  # points that had ended, not sent again

    @property
    def attempts(self) -> dict[str, int]:
        return {o.name: o.attempt for o in self.outcomes}

    def warning(self, *, status: str, when: str) -> str:
        """What run.json says of the resumption: when, after what, and what runs again."""
        again = "; ".join(f"{o.name} runs again as attempt {o.attempt} (the cut-off attempt's records are kept, "
                          "superseded)" for o in self.rerun)
        return (f"resumed with cardgen resume at {when} after the run {status_words(status)}: {self.done} of "
                f"{len(self.outcomes)} points had ended and were not sent again" + (f"; {again}" if again else ""))


def resume_plan(info: RunInfo, points: Sequence[Point]) -> ResumePlan:
    """How to continue the run whose run.json is ``info``, whose suite and server planned ``points``: the points
    that did not end, the cut-off one as its next attempt. A one-line UsageError when run.json names a point
    this cardgen does not plan."""
    recorded = {o.name: o for o in info.points}
    unknown = sorted(set(recorded) - {p.name for p in points})
    if unknown:
        names = ", ".join(unknown[:3]) + (" ..." if len(unknown) > 3 else "")
        raise UsageError(f"run.json names points this cardgen does not plan for the run's suite ({names}): resume "
                         "it with the cardgen that started it")
    outcomes, to_run, rerun = [], [], []
    for point in points:
        outcome = recorded.get(point.name) or PointOutcome(name=point.name, kind=point.kind)
        if not outcome.ended:
            if outcome.started_unix is not None:  # cut off: run it again, its records so far superseded
                outcome = PointOutcome(name=point.name, kind=point.kind, attempt=outcome.attempt + 1)
                rerun.append(outcome)
            to_run.append(point)
        outcomes.append(outcome)
    return ResumePlan(outcomes=outcomes, to_run=to_run, rerun=rerun, done=len(points) - len(to_run))
