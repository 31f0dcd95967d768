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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from cardgen.rundir import RunDir
from cardgen.runinfo import RecordTally
from cardgen.schemas.records import LoadgenSample, MetricSample, RequestRecord, metric_line

log = logging.getLogger("cardgen")


class ScrapeLine(Protocol):
    """A scrape as its writer hands it over: its line (newline included), its times and, where it was made from
    them, its values and their layout (one object for every line of the same names and labels), for a reader that
    holds the scrapes as they are written (:meth:`cardgen.schemas.records.ScrapeSharer.add_written`)."""

    @property
    def line(self) -> str: ...
    @property
    def t(self) -> float: ...
    @property
    def t_end(self) -> float | None: ...
    @property
    def values(self) -> Sequence[float] | None: ...
    @property
    def layout(self) -> object | None: ...


@dataclass(frozen=True)
class _Written:
    """A scrape's line written from its sample."""

    line: str
    t: float
    t_end: float | None
    values: None = None
    layout: None = None


class Lines(Protocol):
    """Where a recorder's lines go, each with its newline: the run's files (:class:`LineFiles`), or another process
    that writes them (:mod:`cardgen.sim.beside`: a modelled build on two cores)."""

    def request(self, line: str) -> None:
        """A request record's line, for ``requests.jsonl``."""

    def scrape(self, scrape: ScrapeLine) -> None:
        """A scrape's line, for ``server_metrics.jsonl``."""

    def loadgen(self, line: str) -> None:
        """A load-generator sample's line, for ``loadgen.jsonl``."""

    def sync(self) -> None:
        """Returns once every line given so far is written. Raises :class:`OSError` where one could not be."""

    def close(self) -> None:
        """Every line written, the files closed (again: nothing). Raises :class:`OSError` where the last could not
        be."""


class LineFiles:
    """:class:`Lines` appended to the run's files, each flushed before its call returns (``loadgen.jsonl`` and
    ``server_metrics.jsonl`` opened with their first line: a run in virtual time has no load-generator samples,
    the load engine's scraper process writes its own scrapes)."""

    def __init__(self, run_dir: Path) -> None:
        files = RunDir(run_dir)
        self._paths = {"requests": files.requests_jsonl, "loadgen": files.loadgen_jsonl,
                       "metrics": files.server_metrics_jsonl}
        self._opened: dict[str, IO[str]] = {}
        self._open("requests")  # there from the session's start, a record or none

    def request(self, line: str) -> None:
        self._append("requests", line)

    def scrape(self, scrape: ScrapeLine) -> None:
        self._append("metrics", scrape.line)

    def loadgen(self, line: str) -> None:
        self._append("loadgen", line)

    def _open(self, name: str) -> IO[str]:
        fh = self._opened[name] = self._paths[name].open("a", encoding="utf-8")
        return fh

    def _append(self, name: str, line: str) -> None:
        fh = self._opened.get(name) or self._open(name)
        fh.write(line)
        fh.flush()

    def sync(self) -> None:
        """Nothing: each line was flushed as it came."""

    def close(self) -> None:
        errors: list[OSError] = []
        for fh in self._opened.values():
            try:
                fh.close()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


class Recorder:
    def __init__(self, run_dir: Path, *, lines: Lines | None = None) -> None:
        """The recorder of ``run_dir``'s session: its lines appended to the run's files, or given to ``lines``."""
        self._lines = LineFiles(run_dir) if lines is None else lines
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
        self._lines.request(rec.model_dump_json() + "\n")
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
        self._lines.scrape(_Written(metric_line(sample), t=sample.t, t_end=sample.t_end))

    def scrape_line(self, scrape: ScrapeLine) -> None:
        """Append one scrape that writes its own line (``metric_line``'s, newline included)."""
        self._check_open("scrape")
        self._lines.scrape(scrape)

    def loadgen(self, sample: LoadgenSample) -> None:
        """Append one load-generator sample."""
        self._check_open("load-generator sample")
        self._lines.loadgen(sample.model_dump_json() + "\n")
        self._tally_loadgen(sample)

    def _tally_loadgen(self, sample: LoadgenSample) -> None:
        self.loop_lags_s.append(sample.loop_lag_s)
        self.loop_lag_times.append(sample.t)
        if sample.cpu_percent is not None:
            self.cpu_percents.append(sample.cpu_percent)
            self.cpu_times.append(sample.t)

    def sync(self) -> None:
        """Returns once every line given so far is on disk (before run.json says what they hold)."""
        if not self.closed:
            self._lines.sync()

    def close(self) -> None:
        """Flush and close the files (again: nothing). Raises when the last flush fails."""
        if self.closed:
            return
        self.closed = True
        self._lines.close()


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
