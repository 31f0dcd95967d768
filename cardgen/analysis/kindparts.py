"""What a kind's own analysis is given and gives back: the analysis stage's half of the kind interface.

A kind whose figures are its own names a :class:`KindAnalysis` (``Kind.analysis``, ``"module:attribute"``, in its
folder). :func:`kind_results` calls each installed kind's with a :class:`KindRun` of that kind's points and
stores what it returns, a versioned :class:`cardgen.schemas.summary.KindResult`, in ``summary.json``'s ``kinds``
under the kind's name; the card reads it back from there (:mod:`cardgen.card.kindparts`), so ``cardgen render``
needs nothing but the run's files. The core never names a kind here: it asks every kind the same thing.

    Kind.analysis ──> KindAnalysis(result=R, analyse=f)     f(KindRun) -> R | None   (None: nothing to show)
    kind_results(...) -> {kind name: R as JSON}              summary.kinds
    kind_precision(...) -> {point name: PointPrecision}      its points' precision, where the kind judges it itself
    kind_tables(summary) -> {file name: DataFrame}           tables/<name>.json|csv made from its result
    kind_missing(kinds that sent requests) -> [words]        summary.missing, for a kind the run did not measure
    kind_kv_estimates(summary.kinds) -> [KVContribution]     its estimate of the KV capacity (kv_cache), if it has one
    Kind.headlines ∋ INGESTION -> kinds_giving(INGESTION)    the points the ingestion headline is fitted over
                                                            (summary.ingestion; calibration, time budget)
    Kind.headlines ∋ GENERATION -> kinds_giving(GENERATION)  the points the generation headline is read at
                                                            (summary.generation; calibration's decode, the site)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from cardgen.analysis.kv import KVContribution, KVLayout
from cardgen.analysis.options import AnalysisOptions
from cardgen.kinds import KINDS, Kind, kind_of, of_kind
from cardgen.kinds.kind import part
from cardgen.points import Point
from cardgen.schemas.records import MetricSample, RequestRecord
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import KindResult, PointPrecision, ScenarioSummary, Summary


@dataclass(frozen=True)
class KindRun:
    """One kind's share of an analysed run."""

    kind: str
    points: list[Point]  # the suite's points of this kind, in suite order
    requests: pd.DataFrame  # their counted request rows (cardgen.analysis.requests.COLUMNS; superseded left out)
    timeseries: pd.DataFrame  # the server's time series over the whole run (cardgen.analysis.timeseries)
    scenarios: list[ScenarioSummary]  # their rows of summary.json's ``scenarios`` (stop reasons, common figures)
    info: RunInfo
    # their counted records as stored (requests.jsonl), for what a row does not keep: given to a kind whose
    # analysis says it reads them (KindAnalysis.reads_records), none to any other (a long run's are never all held)
    records: list[RequestRecord]
    # a calibrated run's predicted request rows of these points (same columns; empty for any other run): what a
    # table of the kind shows beside the measured rows
    predicted: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the server's scrapes as stored (server_metrics.jsonl), for what the time series does not keep: a counter's
    # growth or a gauge's mean over a window (cardgen.analysis.timeseries.counter_growth, gauge_mean)
    metrics: Sequence[MetricSample] = ()
    # how the server holds its KV cache (block size, slots, a cache per slot), read once for every kind
    kv: KVLayout = field(default_factory=KVLayout)
    # what the analysis was asked for (its SLOs and capacity thresholds: ``cardgen render --min-speed`` ...)
    options: AnalysisOptions = field(default_factory=AnalysisOptions)


@dataclass(frozen=True)
class KindAnalysis:
    """A kind's analysis: its result's type (a :class:`KindResult`, versioned) and the function that makes it."""

    result: type[KindResult]
    analyse: Callable[[KindRun], KindResult | None]
    # its points' precision by point name, where the kind judges it itself (summary.json's ``scenarios``
    # ``precision``, set before the tables are made); None: the common rule's
    precision: Callable[[KindRun], Mapping[str, PointPrecision]] | None = None
    # the table files its result makes, given the run's summary (``tables/<name>.json`` and ``.csv``, by name; an
    # empty one is not written)
    tables: Callable[[Any, Summary], Mapping[str, pd.DataFrame]] | None = None
    # summary.missing's words for a run where no point of the kind sent a request: what the run lacks without it
    absent: str | None = None
    # its estimate of the KV cache's capacity from its result (None: the run has no result of the kind), weighed
    # with the server's own figures in summary.json's ``kv_cache`` (cardgen.analysis.kv.kv_capacity)
    kv_estimate: Callable[[Any], KVContribution] | None = None
    # it reads its points' stored records (KindRun.records), not only their rows: the analysis keeps those as it
    # reads requests.jsonl
    reads_records: bool = False


def _runs(*, points: Mapping[str, Point], requests: pd.DataFrame, timeseries: pd.DataFrame,
          scenarios: list[ScenarioSummary], info: RunInfo, records: Sequence[RequestRecord],
          predicted: pd.DataFrame | None, metrics: Sequence[MetricSample] = (),
          kv: KVLayout | None = None,
          options: AnalysisOptions | None = None) -> list[tuple[str, KindAnalysis, KindRun]]:
    """Every installed kind with an analysis of its own and a point in the run: its name, its analysis and its
    share of the run."""
    out = []
    rows_by_kind = dict(tuple(requests.groupby("kind", sort=False))) if len(requests) else {}
    predicted = predicted if predicted is not None else pd.DataFrame()
    predicted_by_kind = dict(tuple(predicted.groupby("kind", sort=False))) if len(predicted) else {}
    kind_of_point = {p.name: p.kind for p in points.values()}
    records_by_kind: dict[str, list[RequestRecord]] = {}
    for r in records:  # one pass, each kind's in the file's order
        records_by_kind.setdefault(kind_of_point.get(r.scenario, ""), []).append(r)
    for name, kind in KINDS.items():
        mine = of_kind(name, points.values())
        if kind.analysis is None or not mine:
            continue
        analysis: KindAnalysis = part(kind.analysis)
        rows = rows_by_kind.get(name, requests.iloc[0:0]).reset_index(drop=True)
        guessed = predicted_by_kind.get(name, predicted.iloc[0:0]).reset_index(drop=True)
        out.append((name, analysis, KindRun(kind=name, points=mine, requests=rows, timeseries=timeseries,
                                            scenarios=of_kind(name, scenarios), info=info,
                                            records=records_by_kind.get(name, []),
                                            predicted=guessed, metrics=metrics, kv=kv or KVLayout(),
                                            options=options or AnalysisOptions())))
    return out


def kind_results(*, points: Mapping[str, Point], requests: pd.DataFrame, timeseries: pd.DataFrame,
                 scenarios: list[ScenarioSummary], info: RunInfo, records: Sequence[RequestRecord],
                 predicted: pd.DataFrame | None = None, metrics: Sequence[MetricSample] = (),
                 kv: KVLayout | None = None, options: AnalysisOptions | None = None) -> dict[str, dict[str, Any]]:
    """Every installed kind's result over its points of the run, as summary.json keeps it (kinds without an
    analysis of their own, or without a point in the run, give none)."""
    out: dict[str, dict[str, Any]] = {}
    for name, analysis, run in _runs(points=points, requests=requests, timeseries=timeseries, scenarios=scenarios,
                                     info=info, records=records, predicted=predicted, metrics=metrics, kv=kv,
                                     options=options):
        result = analysis.analyse(run)
        if result is not None:
            out[name] = result.model_dump(mode="json")
    return out


def kind_precision(*, points: Mapping[str, Point], requests: pd.DataFrame, timeseries: pd.DataFrame,
                   scenarios: list[ScenarioSummary], info: RunInfo,
                   records: Sequence[RequestRecord]) -> dict[str, PointPrecision]:
    """The precision of every point whose kind judges it itself, by point name."""
    out: dict[str, PointPrecision] = {}
    for _, analysis, run in _runs(points=points, requests=requests, timeseries=timeseries, scenarios=scenarios,
                                  info=info, records=records, predicted=None):
        if analysis.precision is not None:
            out.update(analysis.precision(run))
    return out


def record_readers(points: Mapping[str, Point]) -> frozenset[str]:
    """The points whose kind's analysis reads their stored records (:attr:`KindAnalysis.reads_records`): the
    records the analysis keeps as it reads a run's."""
    def reads(kind: Kind[Any]) -> bool:
        return kind.analysis is not None and part(kind.analysis).reads_records

    return frozenset(p.name for p in points.values() if reads(kind_of(p)))


def kind_tables(summary: Summary) -> dict[str, pd.DataFrame]:
    """The table files the installed kinds make of their results (summary.json's ``kinds``), by file name."""
    out: dict[str, pd.DataFrame] = {}
    for name, kind in KINDS.items():
        saved = summary.kinds.get(name)
        if kind.analysis is None or saved is None:
            continue
        analysis: KindAnalysis = part(kind.analysis)
        if analysis.tables is not None:
            out.update(analysis.tables(analysis.result.model_validate(saved), summary))
    return out


def kind_missing(measured: Iterable[str]) -> list[str]:
    """summary.missing's words of every installed kind that says what a run without it lacks, where no point of
    that kind sent a request (``measured``: the kinds of the points that did)."""
    sent = set(measured)
    out = []
    for name, kind in KINDS.items():
        if kind.analysis is None or name in sent:
            continue
        analysis: KindAnalysis = part(kind.analysis)
        if analysis.absent is not None:
            out.append(analysis.absent)
    return out


def kind_kv_estimates(results: Mapping[str, dict[str, Any]]) -> list[KVContribution]:
    """Every installed kind's estimate of the KV capacity, from its result (summary.json's ``kinds``; a kind the
    run has no result of is asked too, with None, so that it can say why it gave none), in the kinds' order."""
    out = []
    for name, kind in KINDS.items():
        if kind.analysis is None:
            continue
        analysis: KindAnalysis = part(kind.analysis)
        if analysis.kv_estimate is not None:
            saved = results.get(name)
            out.append(analysis.kv_estimate(None if saved is None else analysis.result.model_validate(saved)))
    return out
