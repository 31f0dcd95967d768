"""The recorder: appends every finished request to ``requests.jsonl`` (every load-generator sample to
``loadgen.jsonl``, every scrape of the server's ``/metrics`` it is given to ``server_metrics.jsonl``) the moment
it arrives, flushed, and keeps the tallies run.json reports. The load engine and the virtual-time driver write a
run's raw files through it alike.

It raises when a line cannot be written, also after :meth:`Recorder.close`: a record that arrives too late
is a bug to see, not to drop. Its callers (the record sink, the master's message handlers) turn the
exception into a stopped run that says how many records are on disk, which is :attr:`Recorder.on_disk`.

A resumed run appends to the same files. Its tallies must be those of the whole run, as if it had never
stopped, so the recorder first counts what the earlier sessions left (:meth:`Recorder.count_earlier`): the
records that still count, and the superseded ones (a rerun point's cut-off attempt) apart. A ``kill -9``
in the middle of a write leaves a torn last line; appending after it would bury it mid-file, where a reader
can no longer tell it from corruption, so :func:`set_torn_tail_aside` moves it to a side file first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from cardgen.rundir import RunDir
from cardgen.runinfo import RecordTally
from cardgen.schemas.records import LoadgenSample, MetricSample, RequestRecord, metric_line

log = logging.getLogger("cardgen")


class Recorder:
    def __init__(self, run_dir: Path) -> None:
        files = RunDir(run_dir)
        self._requests = files.requests_jsonl.open("a", encoding="utf-8")
        self._loadgen_path = files.loadgen_jsonl
        self._loadgen: IO[str] | None = None  # opened with the first sample (a run in virtual time has none)
        self._metrics_path = files.server_metrics_jsonl
        self._metrics: IO[str] | None = None  # opened with the first scrape given (the load engine's scraper
        # process writes its own)
        self.closed = False
        self.tally = RecordTally()  # the records of the run in requests.jsonl that count, written and flushed
        self.superseded = 0  # records of an earlier, cut-off attempt of a point: on disk, never counted
        # the load generator measuring itself, for run.json's percentiles (no need to re-read the files)
        self.send_lags_s: list[float] = []  # open loop: actual - scheduled send time
        self.send_lags_by_point: dict[str, list[float]] = {}
        self.loop_lags_s: list[float] = []
        self.loop_lag_times: list[float] = []  # when each of loop_lags_s was measured (Unix seconds)
        self.cpu_percents: list[float] = []
        self.cpu_times: list[float] = []  # when each of cpu_percents was measured
        self.listeners: list[Callable[[RequestRecord], None]] = []

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RuntimeError(f"a {what} arrived after the recorder was closed")

    @property
    def total(self) -> int:
        return self.tally.total

    @property
    def failed(self) -> int:
        return self.tally.failed

    @property
    def on_disk(self) -> int:
        """Lines in requests.jsonl: the records that count and the superseded ones."""
        return self.total + self.superseded

    def record(self, rec: RequestRecord) -> None:
        """Append one request record as a JSON line (inf as "Infinity"), flushed before this returns."""
        self._check_open("request record")
        self._requests.write(rec.model_dump_json() + "\n")
        self._requests.flush()
        self._tally(rec)
        for listener in self.listeners:
            listener(rec)

    def count_earlier(self, records: Iterable[RequestRecord], samples: Iterable[LoadgenSample], *,
                      counts: Callable[[RequestRecord], bool]) -> None:
        """Tally what earlier sessions of this run left on disk (nothing is written): the records for which
        ``counts`` is true as if recorded now, the others as superseded; the load-generator samples."""
        for rec in records:
            if counts(rec):
                self._tally(rec)
            else:
                self.superseded += 1
        for sample in samples:
            self._tally_loadgen(sample)

    def _tally(self, rec: RequestRecord) -> None:
        self.tally.add(rec)
        if rec.scheduled_at is not None:
            self.send_lags_s.append(max(0.0, rec.sent_at - rec.scheduled_at))
            self.send_lags_by_point.setdefault(rec.scenario, []).append(self.send_lags_s[-1])

    def scrape(self, sample: MetricSample) -> None:
        """Append one scrape of the server's ``/metrics``, as the scraper writes it."""
        self._check_open("scrape")
        if self._metrics is None:
            self._metrics = self._metrics_path.open("a", encoding="utf-8")
        self._metrics.write(metric_line(sample))
        self._metrics.flush()

    def scrape_line(self, line: str) -> None:
        """Append one scrape already written as its line (``metric_line``'s, newline included)."""
        self._check_open("scrape")
        if self._metrics is None:
            self._metrics = self._metrics_path.open("a", encoding="utf-8")
        self._metrics.write(line)
        self._metrics.flush()

    def loadgen(self, sample: LoadgenSample) -> None:
        """Append one load-generator sample."""
        self._check_open("load-generator sample")
        if self._loadgen is None:
            self._loadgen = self._loadgen_path.open("a", encoding="utf-8")
        self._loadgen.write(sample.model_dump_json() + "\n")
        self._loadgen.flush()
        self._tally_loadgen(sample)

    def _tally_loadgen(self, sample: LoadgenSample) -> None:
        self.loop_lags_s.append(sample.loop_lag_s)
        self.loop_lag_times.append(sample.t)
        if sample.cpu_percent is not None:
            self.cpu_percents.append(sample.cpu_percent)
            self.cpu_times.append(sample.t)

    def close(self) -> None:
        """Flush and close both files (again: nothing). Raises when the last flush fails."""
        if self.closed:
            return
        self.closed = True
        errors: list[OSError] = []
        for fh in (self._requests, self._loadgen, self._metrics):
            if fh is None:
                continue
            try:
                fh.close()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def set_torn_tail_aside(path: Path) -> int:
    """Move a torn last line of the JSON-lines file ``path`` (bytes after its last newline: a write cut short)
    to ``<name>.torn`` next to it, so that lines appended now start on a line of their own. Returns the bytes
    moved (0 when the file ends with a newline or does not exist). The torn bytes are kept, never dropped."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        chunk, end = 1 << 16, size
        cut = 0
        while end > 0:  # find the last newline, reading backwards
            start = max(0, end - chunk)
            fh.seek(start)
            at = fh.read(end - start).rfind(b"\n")
            if at >= 0:
                cut = start + at + 1
                break
            end = start
        fh.seek(cut)
        torn = fh.read()
    side = path.with_name(path.name + ".torn")
    with side.open("ab") as out:
        out.write(torn + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.truncate(path, cut)
    return len(torn)
