"""The data behind each figure, as plain numpy arrays (no matplotlib here): what tests assert on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cardgen import numbers
from cardgen.analysis.ingestion import IngestionResult
from cardgen.analysis.scenarios import closed_pairs
from cardgen.kinds import kind_of
from cardgen.schemas.summary import ScenarioSummary


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


def total_throughput(scenarios: Sequence[ScenarioSummary]) -> list[Line]:
    """Total output throughput (tok/s) against parallel requests, one line per (prompt, output) pair."""
    return [Line(pair_name(pair), _arr([s.parallel for s in pts]), _arr([s.output_tok_s for s in pts]))
            for pair, pts in closed_pairs(scenarios).items()]


@dataclass(frozen=True)
class PairPanels:
    """Per pair: per-request speed from start and TTFT against parallel requests (median, p25-p75), and the
    largest KV usage (percent) the server reported at each point."""

    pair: tuple[int, int]
    parallel: np.ndarray
    speed: Line
    ttft: Line
    kv_usage_pct: np.ndarray


def pair_panels(scenarios: Sequence[ScenarioSummary]) -> list[PairPanels]:
    out = []
    for pair, pts in closed_pairs(scenarios).items():
        x = _arr([s.parallel for s in pts])
        sp = [s.speed_from_start_tok_s for s in pts]
        tt = [s.ttft_s for s in pts]
        out.append(PairPanels(
            pair=pair, parallel=x,
            speed=Line("speed from start", x, _arr([d.p50 for d in sp]), _arr([d.p25 for d in sp]),
                       _arr([d.p75 for d in sp])),
            ttft=Line("TTFT", x, _arr([d.p50 for d in tt]), _arr([d.p25 for d in tt]), _arr([d.p75 for d in tt])),
            kv_usage_pct=_arr([None if s.kv_usage_max is None else 100 * s.kv_usage_max for s in pts]),
        ))
    return out


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
    """Median E2E latency (s) against throughput (req/s): one line per closed-loop pair (by parallel count) and
    per open-loop pair (by rate)."""
    lines: list[Line] = []
    for pair, pts in closed_pairs(scenarios).items():
        lines.append(Line(f"{pair_name(pair)}, closed loop", _arr([s.req_s for s in pts]),
                                _arr([s.e2e_s.p50 for s in pts])))
    open_pairs: dict[tuple[int, int], list[ScenarioSummary]] = {}
    for s in scenarios:
        if kind_of(s).rate_driven and s.requests > s.failed and not s.replay:  # a replay has its own timeline
            open_pairs.setdefault((s.prompt_tokens, s.output_tokens), []).append(s)
    for pair, pts in sorted(open_pairs.items()):
        pts = sorted(pts, key=lambda s: np.inf if s.all_at_once else (s.rate_rps or 0))
        lines.append(Line(f"{pair_name(pair)}, open loop", _arr([s.req_s for s in pts]),
                          _arr([s.e2e_s.p50 for s in pts])))
    return lines


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
    groups: list[tuple[str, str, list[tuple[str, ScenarioSummary]]]] = []  # (title, x label, points)
    for pair, pts in closed_pairs(scenarios).items():
        groups.append((f"{pair_name(pair)}, closed loop", "parallel requests", [(f"{s.parallel}", s) for s in pts]))
    open_pts = [s for s in scenarios if kind_of(s).rate_driven and s.requests > s.failed and not s.replay]
    for pair in sorted({(s.prompt_tokens, s.output_tokens) for s in open_pts}):
        pts = sorted((s for s in open_pts if (s.prompt_tokens, s.output_tokens) == pair),
                     key=lambda s: np.inf if s.all_at_once else (s.rate_rps or 0))
        groups.append((f"{pair_name(pair)}, open loop", "rate",
                       [(s.rate_label if s.all_at_once else f"{s.rate_label}/s", s) for s in pts]))
    return [PercentileBars(title, [lab for lab, _ in pts], _arr([s.e2e_s.p50 for _, s in pts]),
                           _arr([s.e2e_s.p90 for _, s in pts]), _arr([s.e2e_s.p95 for _, s in pts]), xlabel)
            for title, xlabel, pts in groups]


def pareto_front(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *, x_higher: bool = True,
                 y_higher: bool = True) -> np.ndarray:
    """Which points no other point dominates: another point dominates one when it is at least as good on both
    axes and better on one (``x_higher``: a larger x is better; else a smaller one). Points with a NaN coordinate
    are never on the front and dominate nothing; equal points are both on the front."""
    xs = np.asarray(x, dtype=float) * (1 if x_higher else -1)
    ys = np.asarray(y, dtype=float) * (1 if y_higher else -1)
    ok = np.isfinite(xs) & np.isfinite(ys)
    ge = (xs[None, :] >= xs[:, None]) & (ys[None, :] >= ys[:, None])  # [i, j]: j at least as good as i
    gt = (xs[None, :] > xs[:, None]) | (ys[None, :] > ys[:, None])
    dominated = (ge & gt & ok[None, :]).any(axis=1)
    return ok & ~dominated


@dataclass(frozen=True)
class InteractivityCurve:
    """One (prompt, output) pair of the closed loop, a point per parallel count: output throughput per GPU
    against what each user gets (median decode speed, tokens/s per user) and against the median TTFT, with the
    Pareto front of each plane (more throughput and more speed per user; more throughput and less TTFT)."""

    pair: tuple[int, int]
    parallel: np.ndarray
    tok_s_per_user: np.ndarray
    ttft_s: np.ndarray
    tok_s_per_gpu: np.ndarray
    front_user: np.ndarray  # bool: on the throughput / speed-per-user front
    front_ttft: np.ndarray  # bool: on the throughput / TTFT front
    # bool: predicted by a calibrated run's fitted server, not measured (drawn hollow); empty: all measured
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def throughput_interactivity(scenarios: Sequence[ScenarioSummary], *, gpus: int | None) -> list[InteractivityCurve]:
    """Per closed-loop pair: the serving engineer's curve (SemiAnalysis InferenceX's): total output tokens/s
    divided by the GPUs serving (``gpus``; one when unknown) against tokens/s per user and against TTFT."""
    out = []
    for pair, pts in closed_pairs(scenarios).items():
        per_user = _arr([s.decode_tok_s.p50 for s in pts])
        ttft = _arr([s.ttft_s.p50 for s in pts])
        per_gpu = _arr([s.output_tok_s for s in pts]) / max(gpus or 1, 1)
        if not (np.isfinite(per_user) & np.isfinite(per_gpu)).any():
            continue
        out.append(InteractivityCurve(pair, _arr([s.parallel for s in pts]), per_user, ttft, per_gpu,
                                      pareto_front(per_user, per_gpu), pareto_front(ttft, per_gpu, x_higher=False),
                                      np.array([s.basis == "predicted" for s in pts], dtype=bool)))
    return out
