"""The recorder: appends every finished request to ``requests.jsonl`` (and every load-generator sample to
``loadgen.jsonl``) the moment it arrives, flushed, and keeps the tallies run.json reports.

It raises when a line cannot be written, also after :meth:`Recorder.close`: a record that arrives too late
is a bug to see, not to drop. Its callers (the record sink, the master's message handlers) turn the
exception into a stopped run that says how many records are on disk, which is :attr:`Recorder.total`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from cardgen.rundir import RunDir
from cardgen.schemas.records import LoadgenSample, RequestRecord

log = logging.getLogger("cardgen.load")


class Recorder:
    def __init__(self, run_dir: Path) -> None:
        files = RunDir(run_dir)
        self._requests = files.requests_jsonl.open("a", encoding="utf-8")
        self._loadgen = files.loadgen_jsonl.open("a", encoding="utf-8")
        self.closed = False
        self.total = 0  # lines on disk in requests.jsonl, written and flushed
        self.failed = 0
        self.failures_by_kind: Counter[str] = Counter()
        self.length_mismatches = 0
        self.by_point: Counter[str] = Counter()
        self.output_tokens_by_point: Counter[str] = Counter()
        self.failed_by_point: Counter[str] = Counter()
        # the load generator measuring itself, for run.json's percentiles (no need to re-read the files)
        self.send_lags_s: list[float] = []  # open loop: actual - scheduled send time
        self.loop_lags_s: list[float] = []
        self.cpu_percents: list[float] = []
        self.listeners: list[Callable[[RequestRecord], None]] = []

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RuntimeError(f"a {what} arrived after the recorder was closed")

    def record(self, rec: RequestRecord) -> None:
        """Append one request record as a JSON line (inf as "Infinity"), flushed before this returns."""
        self._check_open("request record")
        self._requests.write(rec.model_dump_json() + "\n")
        self._requests.flush()
        self.total += 1
        point = rec.scenario
        self.by_point[point] += 1
        if rec.scheduled_at is not None:
            self.send_lags_s.append(max(0.0, rec.sent_at - rec.scheduled_at))
        if rec.error is not None:
            self.failed += 1
            self.failed_by_point[point] += 1
            self.failures_by_kind[str(rec.error_kind or "unknown")] += 1
        else:
            out = rec.output_tokens
            self.output_tokens_by_point[point] += int(out or 0)
            if out is not None and out != rec.output_tokens_target:
                self.length_mismatches += 1
        for listener in self.listeners:
            listener(rec)

    def loadgen(self, sample: LoadgenSample) -> None:
        """Append one load-generator sample."""
        self._check_open("load-generator sample")
        self._loadgen.write(sample.model_dump_json() + "\n")
        self._loadgen.flush()
        self.loop_lags_s.append(sample.loop_lag_s)
        if sample.cpu_percent is not None:
            self.cpu_percents.append(sample.cpu_percent)

    def close(self) -> None:
        """Flush and close both files (again: nothing). Raises when the last flush fails."""
        if self.closed:
            return
        self.closed = True
        errors: list[OSError] = []
        for fh in (self._requests, self._loadgen):
            try:
                fh.close()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
