"""``run.json`` as a run fills it: the one home of its assembly, for the load engine (real time) and the
virtual-time driver alike.

    RunPlan                  a run over HTTP as resolved before it starts: the build's config, its points and
                             price, the run directory, the server's URL and what cardgen started (made once)
    begin_run_info(...)      what is known before any request: the command, the suite, the server, the clock
    RecordTally              what requests.jsonl holds that counts: totals, failures by kind, per point
    RecordTally.fill(info)   ... written into run.json's tallies
    utc_text(ts)             run.json's times as text (ISO 8601, UTC, whole seconds)

Pure: nothing here reads a clock or a file; the caller says when.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cardgen import __version__
from cardgen.buildconfig import BuildConfig, LoadOptions
from cardgen.points import Point
from cardgen.redact import redact_argv
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import PointOutcome, PriceDescription, RunInfo, ServerInfo
from cardgen.suite import Suite

Clock = Literal["real", "virtual"]


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """One run over HTTP as it was resolved, before any request: what the load stage (:mod:`cardgen.load.stage`)
    is given, whole. Made once (:mod:`cardgen.cli.measure`: a build's from its :class:`BuildConfig`, a resume's
    from run.json), from options the command line checked as it parsed them, so nothing here is checked again;
    what only the server cardgen starts can say (its URL, how it was started) is added with ``replace`` once it
    is up. The API key is no part of it (a secret: it travels beside, to the stage that sends requests)."""

    model: str  # the model's name on the card (a GGUF file's stem)
    suite: Suite
    points: tuple[Point, ...]  # the suite expanded once; the load fits them to the server's context
    run_dir: Path  # checked free for a new run, or the run resumed
    load: LoadOptions  # how the load runs: workers a count or auto (a resume's: the count the run had)
    quiet: bool = False  # no progress bars
    url: str = ""  # the server's base URL, checked (empty until a server cardgen starts is up)
    engine: str | None = None  # the engine adapter forced (None: detect it)
    launch: Mapping[str, Any] | None = None  # how cardgen started the engine (run.json ``server.launch``)
    modelled: bool = False  # the virtual server, measured over HTTP
    sim: Mapping[str, Any] | None = None  # what the virtual server is (run.json ``sim``)
    gpu: Mapping[str, Any] = field(default_factory=dict)  # the GPU as given or modelled (run.json ``gpu``)
    price: PriceDescription | None = None  # USD per GPU-hour, written with the first run.json
    build: BuildConfig | None = None  # how the run was built (None: resumed: run.json keeps it already)
    argv: tuple[str, ...] = ()  # the command line (run.json masks its secrets)


def utc_text(ts: float) -> str:
    """``2026-09-21T14:13:20Z``: a Unix time as run.json writes it."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def begin_run_info(*, argv: Sequence[str], model: str, suite: Suite, server: ServerInfo, started_unix: float,
                   clock: Clock, modelled: bool, gpu: Mapping[str, Any] | None = None,
                   sim: Mapping[str, Any] | None = None, workers: int = 0, workers_choice: str | None = None,
                   warnings: Iterable[str] = (), points: Iterable[PointOutcome] = (),
                   build: BuildConfig | None = None, price: PriceDescription | None = None) -> RunInfo:
    """run.json as first written: the command (its secrets masked), how the run was built (``build``: secrets
    masked as it is saved), the suite, the server, which clock times the requests, the points planned (none
    reached yet) and the price of a GPU-hour."""
    return RunInfo(
        cardgen_version=__version__, command=redact_argv(list(argv)), model=model, suite=suite.name,
        suite_spec=suite.model_dump(mode="json"), started_at=utc_text(started_unix), started_unix=started_unix,
        server=server, clock=clock, modelled=modelled, sim=dict(sim) if sim is not None else None,
        gpu=dict(gpu or {}), workers=workers, workers_choice=workers_choice, warnings=list(warnings),
        points=list(points), build=build, price=price)


@dataclass
class RecordTally:
    """What the records of a run that count add up to (superseded records of a cut-off attempt are not
    given to it)."""

    total: int = 0
    failed: int = 0
    failures_by_kind: Counter[str] = field(default_factory=Counter)
    length_mismatches: int = 0  # successful forced requests whose usage.completion_tokens != the forced length

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RecordTally:
        tally = cls()
        for rec in records:
            tally.add(rec)
        return tally

    def add(self, rec: RequestRecord) -> None:
        self.total += 1
        if rec.error is not None:
            self.failed += 1
            self.failures_by_kind[str(rec.error_kind or "unknown")] += 1
        elif (rec.output_tokens is not None and rec.output_tokens != rec.output_tokens_target
              and rec.length_forced is not False):
            self.length_mismatches += 1

    def fill(self, info: RunInfo) -> None:
        """Write the tallies into ``info`` (run.json), with a warning when the server did not honour the forced
        output lengths."""
        info.requests_total, info.requests_failed = self.total, self.failed
        info.failures_by_kind = dict(self.failures_by_kind)
        info.length_mismatches = self.length_mismatches
        if self.length_mismatches:
            info.warnings.append(f"{self.length_mismatches} requests returned a different number of tokens than "
                                 "forced (the server may not honour ignore_eos/min_tokens)")

    def end(self, info: RunInfo, *, ended_unix: float, status: str) -> None:
        """``info`` as the run ended: when, how, and its tallies."""
        info.ended_unix, info.ended_at, info.status = ended_unix, utc_text(ended_unix), status
        self.fill(info)


def load_seconds(info: RunInfo) -> float:
    """The wall time of a run's load as the plan counts it: from the start of its first point to the end of
    its last (the run's own start and end when it did not record its points)."""
    starts = [p.started_unix for p in info.points if p.started_unix is not None]
    ends = [p.ended_unix for p in info.points if p.ended_unix is not None]
    if starts and ends:
        return max(ends) - min(starts)
    return (info.ended_unix or info.started_unix) - info.started_unix
