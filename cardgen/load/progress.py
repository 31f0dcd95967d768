"""A progress bar per point: requests done of expected, failures, output tokens/s. Silent with --quiet."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cardgen.points import Point
from cardgen.schemas.records import RequestRecord


class PointProgress:
    def __init__(self, *, quiet: bool, console: Console | None = None) -> None:
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None
        self.task: Any = None
        self.point: Point | None = None
        self.done = self.failed = self.tokens = 0
        self.t0 = time.time()

    def __enter__(self) -> PointProgress:
        if not self.quiet:
            self.progress = Progress(
                TextColumn("{task.description:<34}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"), TextColumn("{task.fields[tok_s]:>8.0f} out tok/s"),
                TimeElapsedColumn(), console=self.console, transient=False, refresh_per_second=4)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)

    def start(self, point: Point) -> None:
        self.point = point
        self.done = self.failed = self.tokens = 0
        self.t0 = time.time()
        if self.progress is not None:
            self.task = self.progress.add_task(point.name, total=point.expected_requests(), failed=0, tok_s=0.0)

    def on_record(self, rec: RequestRecord) -> None:
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

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, highlight=False, markup=False)
