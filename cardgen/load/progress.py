"""A progress bar per point: requests done of expected, failures, output tokens/s, and the time left against
the cost plan when there is one. Silent with --quiet.

The plan comes from a :data:`PlanSource` that may know it only after the load has started (planning the
``full`` suite takes as long as the first seconds of its load): the display asks it again at every point and
record, and prints the plan's line the first time it answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from cardgen.numbers import duration_text
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord


@dataclass(frozen=True)
class PlannedTime:
    """The cost plan as the progress display uses it."""

    seconds_by_point: Mapping[str, float]  # the predicted wall seconds of each point (0 for one it skips)
    gpu_time_s: float  # the whole run's
    line: str  # its total in words: "plan: 14 points, ~9 min 47 s of GPU time (modelled)"


#: the plan, or None while it is not known (or could not be made); must answer at once, never block
PlanSource = Callable[[], PlannedTime | None]


class _TimeLeftColumn(ProgressColumn):
    """The time left against the plan, on the running point's line only."""

    def __init__(self, owner: PointProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> Text:
        if task.id != self.owner.task or task.finished:
            return Text("")
        left = self.owner.time_left_s()
        return Text("" if left is None else f"~{duration_text(left)} left", style="progress.remaining")


class PointProgress:
    def __init__(self, *, quiet: bool, console: Console | None = None, plan: PlanSource | None = None,
                 points: Sequence[str] = ()) -> None:
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None
        self.task: Any = None
        self.point: Point | None = None
        self.done = self.failed = self.tokens = 0
        self.t0 = time.time()
        self.plan_source = plan
        self.plan: PlannedTime | None = None
        self.points = list(points)  # the names of the points this session runs, in order
        self.position = -1  # the index in ``points`` of the point running (or last run)

    def __enter__(self) -> PointProgress:
        self._check_plan()
        if not self.quiet:
            self.progress = Progress(
                TextColumn("{task.description:<34}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"), TextColumn("{task.fields[tok_s]:>8.0f} out tok/s"),
                TimeElapsedColumn(), _TimeLeftColumn(self), console=self.console, transient=False,
                refresh_per_second=4)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)

    def _check_plan(self) -> None:
        """Ask the plan source once more until it answers; print the plan's line when it does."""
        if self.plan is None and self.plan_source is not None:
            self.plan = self.plan_source()
            if self.plan is not None:
                self.say(self.plan.line)

    def time_left_s(self, now: float | None = None) -> float | None:
        """Planned seconds of the points not yet done: what remains of the running point's (never below 0) and
        all of those after it. None without a plan."""
        if self.plan is None:
            return None
        planned = self.plan.seconds_by_point
        later = self.points[self.position + 1:]
        left = sum(planned.get(name, 0.0) for name in later)
        if self.point is not None and self.task is not None:
            now = time.time() if now is None else now
            left += max(0.0, planned.get(self.point.name, 0.0) - (now - self.t0))
        return left

    def start(self, point: Point) -> None:
        self._check_plan()
        self.point = point
        if point.name in self.points[self.position + 1:]:
            self.position = self.points.index(point.name, self.position + 1)  # points between were skipped
        self.done = self.failed = self.tokens = 0
        self.t0 = time.time()
        if self.progress is not None:
            self.task = self.progress.add_task(point.name, total=point.expected_requests(), failed=0, tok_s=0.0)
        else:
            self.task = point.name

    def on_record(self, rec: RequestRecord) -> None:
        self._check_plan()
        self.done += 1
        if rec.error is not None:
            self.failed += 1
        else:
            self.tokens += rec.output_tokens or 0
        if self.progress is not None and self.task is not None:
            elapsed = max(time.time() - self.t0, 1e-6)
            total = max(self.point.expected_requests() if self.point else 0, self.done)
            self.progress.update(self.task, completed=self.done, total=total, failed=self.failed,
                                 tok_s=self.tokens / elapsed)

    def end(self, point: Point) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, total=self.done, completed=self.done)
        self.task = None
        self._check_plan()

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, highlight=False, markup=False, soft_wrap=True)  # one line: greppable
