"""What a kind's own analysis is given and gives back: the analysis stage's half of the kind interface.

A kind whose figures are its own names a :class:`KindAnalysis` (``Kind.analysis``, ``"module:attribute"``, in its
folder). :func:`kind_results` calls each installed kind's with a :class:`KindRun` of that kind's points and
stores what it returns, a versioned :class:`cardgen.schemas.summary.KindResult`, in ``summary.json``'s ``kinds``
under the kind's name; the card reads it back from there (:mod:`cardgen.card.kindparts`), so ``cardgen render``
needs nothing but the run's files. The core never names a kind here: it asks every kind the same thing.

    Kind.analysis ──> KindAnalysis(result=R, analyse=f)     f(KindRun) -> R | None   (None: nothing to show)
    kind_results(...) -> {kind name: R as JSON}              summary.kinds
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from cardgen.kinds import KINDS, of_kind
from cardgen.kinds.kind import part
from cardgen.points import Point
from cardgen.schemas.records import MetricSample, RequestRecord
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import KindResult, ScenarioSummary


@dataclass(frozen=True)
class KindRun:
    """One kind's share of an analysed run."""

    kind: str
    points: list[Point]  # the suite's points of this kind, in suite order
    requests: pd.DataFrame  # their counted request rows (cardgen.analysis.requests.COLUMNS; superseded left out)
    timeseries: pd.DataFrame  # the server's time series over the whole run (cardgen.analysis.timeseries)
    scenarios: list[ScenarioSummary]  # their rows of summary.json's ``scenarios`` (stop reasons, common figures)
    info: RunInfo
    records: list[RequestRecord]  # their counted records as stored (requests.jsonl), for what a row does not keep
    # the server's scrapes as stored (server_metrics.jsonl), for what the time series does not keep: a counter's
    # growth or a gauge's mean over a window (cardgen.analysis.timeseries.counter_growth, gauge_mean)
    metrics: Sequence[MetricSample] = ()


@dataclass(frozen=True)
class KindAnalysis:
    """A kind's analysis: its result's type (a :class:`KindResult`, versioned) and the function that makes it."""

    result: type[KindResult]
    analyse: Callable[[KindRun], KindResult | None]


def kind_results(*, points: Mapping[str, Point], requests: pd.DataFrame, timeseries: pd.DataFrame,
                 scenarios: list[ScenarioSummary], info: RunInfo,
                 records: Sequence[RequestRecord],
                 metrics: Sequence[MetricSample] = ()) -> dict[str, dict[str, Any]]:
    """Every installed kind's result over its points of the run, as summary.json keeps it (kinds without an
    analysis of their own, or without a point in the run, give none)."""
    out: dict[str, dict[str, Any]] = {}
    rows_by_kind = dict(tuple(requests.groupby("kind", sort=False))) if len(requests) else {}
    for name, kind in KINDS.items():
        mine = of_kind(name, points.values())
        if kind.analysis is None or not mine:
            continue
        analysis: KindAnalysis = part(kind.analysis)
        rows = rows_by_kind.get(name, requests.iloc[0:0]).reset_index(drop=True)
        names = {p.name for p in mine}
        result = analysis.analyse(KindRun(kind=name, points=mine, requests=rows, timeseries=timeseries,
                                          scenarios=of_kind(name, scenarios), info=info,
                                          records=[r for r in records if r.scenario in names], metrics=metrics))
        if result is not None:
            out[name] = result.model_dump(mode="json")
    return out
