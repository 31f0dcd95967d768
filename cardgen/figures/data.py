"""The data behind each figure, as plain numpy arrays (no matplotlib here): what tests assert on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen import numbers
from cardgen.analysis.ingestion import IngestionResult
from cardgen.schemas.summary import ScenarioSummary
from cardgen.sweeps import InteractivityCurve, pareto_front, sweeps, throughput_interactivity


def _arr(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


@dataclass(frozen=True)
class Line:
    """One labelled line; ``low``/``high`` an optional band around it."""

    label: str
    x: np.ndarray
    y: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None


def pair_name(pair: tuple[int, int]) -> str:
    return f"{pair[0]} in / {pair[1]} out"


@dataclass(frozen=True)
class IngestionPlot:
    prompt_tokens: np.ndarray
    ttft_s: np.ndarray
    inlier: np.ndarray
    line_x: np.ndarray
    line_y: np.ndarray
    label: str


def ingestion(result: IngestionResult) -> IngestionPlot:
    """The sweep's points (kept / dropped by the trimming) and the fitted line over their range."""
    fit = result.fit
    x = np.array([0.0, float(result.prompt_tokens.max())])
    return IngestionPlot(result.prompt_tokens, result.ttft_s, result.inlier, x,
                         fit.intercept_s + fit.slope_s_per_token * x,
                         f"fit: {numbers.ms(fit.intercept_s)} + tokens / {numbers.tok_s(fit.tok_s or None)}")


@dataclass(frozen=True)
class Timeline:
    """Server gauges against seconds since the first request; scenario starts as vertical marks."""

    t_s: np.ndarray
    kv_usage_pct: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    scenario_starts_s: np.ndarray


def timeline(ts: pd.DataFrame, scenarios: Sequence[ScenarioSummary]) -> Timeline | None:
    if ts.empty:
        return None
    starts = [s.started_unix for s in scenarios if s.started_unix is not None]
    t0 = min(starts) if starts else float(ts["t"].iloc[0])
    return Timeline(ts["t"].to_numpy(dtype=float) - t0, 100 * ts["kv_usage"].to_numpy(dtype=float),
                    ts["running"].to_numpy(dtype=float), ts["waiting"].to_numpy(dtype=float),
                    np.array(sorted(s - t0 for s in starts), dtype=float))


def throughput_latency(scenarios: Sequence[ScenarioSummary]) -> list[Line]:
    """Median E2E latency (s) against throughput (req/s): one line per pair of each kind's sweep (a closed loop's
    by parallel count, an open loop's by rate)."""
    return [Line(f"{pair_name(pair)}, {kind.sweep.name}", _arr([s.req_s for s in pts]),
                 _arr([s.e2e_s.p50 for s in pts])) for kind, pair, pts in sweeps(scenarios) if kind.sweep is not None]


@dataclass(frozen=True)
class PercentileBars:
    """E2E latency p50 / p90 / p95 (s) per load point of one group (a closed pair or the open-loop rates)."""

    title: str
    labels: list[str]
    p50: np.ndarray
    p90: np.ndarray
    p95: np.ndarray
    xlabel: str  # what the groups' load points are: parallel requests, or a rate


def latency_percentiles(scenarios: Sequence[ScenarioSummary]) -> list[PercentileBars]:
    """A group of bars per pair of each kind's sweep, a bar per point along it."""
    return [PercentileBars(f"{pair_name(pair)}, {kind.sweep.name}", [kind.sweep.label(s) for s in pts],
                           _arr([s.e2e_s.p50 for s in pts]), _arr([s.e2e_s.p90 for s in pts]),
                           _arr([s.e2e_s.p95 for s in pts]), kind.sweep.axis)
            for kind, pair, pts in sweeps(scenarios) if kind.sweep is not None]


__all__ = ["InteractivityCurve", "IngestionPlot", "Line", "PercentileBars", "Timeline", "ingestion", "latency_percentiles",
           "pair_name", "pareto_front", "throughput_interactivity", "throughput_latency", "timeline"]
