"""A replayed trace over time (pure): the trace's requests sent at its own offsets (``kind: open``, a trace as the
``dataset``, no ``rates``), cut into time slices.

Per window (a round width that makes at most :data:`MAX_WINDOWS` of them): the requests sent in it and their
arrival rate; the output tokens whose chunks arrived in it (each request's output tokens shared equally among its
chunks) per second; the p50 and p99 TTFT and the SLO attainment of the requests sent in it; the longest send lag;
and the server's KV usage and waiting requests over it. Over the whole replay: the send lag against the trace's
offsets (actual send - the scheduled time, which is the point's start + offset / speedup), the SLO attainment
(requests that met every SLO / requests: a failed one did not), and the server's prefix-cache hit rate where it
counts hits and queries (a Mooncake trace's shared blocks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol, cast

import numpy as np
import pandas as pd

from cardgen.analysis.scenarios import meets_slo
from cardgen.analysis.stats import describe
from cardgen.analysis.timeseries import counter_growth, window
from cardgen.points import Point
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import ReplayResult, ReplayWindow, ScenarioSummary
from cardgen.traces import describe as describe_trace

MAX_WINDOWS = 30
WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)  # seconds
LATE_S = 0.010  # a send this much after its offset counts as late


class Replaying(Protocol):
    """What a point that replays a trace holds (``Kind.replays``): the factor its offsets were divided by."""

    @property
    def speedup(self) -> float: ...



def window_width(span_s: float) -> float:
    """The roundest width that cuts ``span_s`` into at most :data:`MAX_WINDOWS` windows."""
    return float(next((w for w in WIDTHS if span_s / w <= MAX_WINDOWS), math.ceil(span_s / MAX_WINDOWS)))


def _opt(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _chunk_tokens(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Every text chunk's arrival and its share of its request's output tokens."""
    times, tokens = [], []
    for chunks, out, ok in zip(rows["chunk_times"], rows["output_tokens"], rows["ok"], strict=True):
        if ok and len(chunks) and out == out:
            times.append(np.asarray(chunks, dtype=float))
            tokens.append(np.full(len(chunks), float(out) / len(chunks)))
    if not times:
        return np.empty(0), np.empty(0)
    return np.concatenate(times), np.concatenate(tokens)


def replay_windows(rows: pd.DataFrame, ts: pd.DataFrame, good: np.ndarray, *, start: float, width: float,
                   ) -> list[ReplayWindow]:
    """The windows of one replay (``good``: per row, whether it met every SLO)."""
    end = float(np.nanmax(rows["end_at"].to_numpy(dtype=float)))
    chunk_t, chunk_tok = _chunk_tokens(rows)
    sent = rows["sent_at"].to_numpy(dtype=float)
    out = []
    for k in range(max(1, math.ceil((end - start) / width))):
        a, b = start + k * width, start + (k + 1) * width
        mask = (sent >= a) & (sent < b)
        here = rows[mask]
        ok = here[here["ok"]]
        ttft = ok["ttft_s"].to_numpy(dtype=float)
        ttft = ttft[np.isfinite(ttft)]
        lag = here["send_lag_s"].to_numpy(dtype=float)
        lag = lag[np.isfinite(lag)]
        win = window(ts, a, b) if not ts.empty else ts
        out.append(ReplayWindow(
            start_s=k * width, end_s=(k + 1) * width, sent=int(mask.sum()), arrival_rps=float(mask.sum()) / width,
            output_tok_s=float(chunk_tok[(chunk_t >= a) & (chunk_t < b)].sum()) / width,
            ttft_p50_s=_opt(np.percentile(ttft, 50)) if len(ttft) else None,
            ttft_p99_s=_opt(np.percentile(ttft, 99)) if len(ttft) else None,
            slo_attainment=float(good[mask].mean()) if mask.any() else None,
            send_lag_max_s=_opt(lag.max()) if len(lag) else None,
            kv_usage_mean=_opt(win["kv_usage"].mean()) if len(win) else None,
            kv_usage_max=_opt(win["kv_usage"].max()) if len(win) else None,
            waiting_max=_opt(win["waiting"].max()) if len(win) else None))
    return out


def replay(point: Point, rows: pd.DataFrame, ts: pd.DataFrame, metrics: Sequence[MetricSample], *,
           engine: str | None, slo_ttft_s: float, slo_tpot_s: float) -> ReplayResult:
    """One replayed trace from its counted request rows (warm-ups: none)."""
    result = ReplayResult(scenario=point.name, group=point.group, dataset=describe_trace(point.dataset or ""),
                          speedup=cast(Replaying, point.params).speedup, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
    if rows.empty:
        return result
    rows = rows.sort_values("sent_at", kind="stable")
    good = meets_slo(rows, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s).to_numpy(dtype=bool)
    start, end = float(rows["sent_at"].min()), float(np.nanmax(rows["end_at"].to_numpy(dtype=float)))
    scheduled = rows["scheduled_at"].to_numpy(dtype=float)
    lag = rows["send_lag_s"].to_numpy(dtype=float)
    result.requests, result.failed = len(rows), int((~rows["ok"]).sum())
    result.duration_s = end - start
    result.trace_span_s = _opt(np.nanmax(scheduled) - np.nanmin(scheduled)) if np.isfinite(scheduled).any() else None
    result.send_lag_s = describe(lag, ci=False)
    result.late_sends = int((lag > LATE_S).sum())
    result.slo_attainment = float(good.mean())
    _, tokens = _chunk_tokens(rows)
    result.output_tok_s = float(tokens.sum()) / result.duration_s if result.duration_s > 0 else None
    q = counter_growth(metrics, engine=engine, role="prefix_cache_queries", start=start, end=end)
    h = counter_growth(metrics, engine=engine, role="prefix_cache_hits", start=start, end=end)
    result.prefix_cache_hit_rate = h.value / q.value if q is not None and h is not None and q.value > 0 else None
    result.window_s = window_width(end - start)
    result.windows = replay_windows(rows, ts, good, start=start, width=result.window_s)
    return result


def replays(points: Sequence[Point], requests: pd.DataFrame, ts: pd.DataFrame, metrics: Sequence[MetricSample], *,
            engine: str | None, slo_ttft_s: float, slo_tpot_s: float) -> list[ReplayResult]:
    """Every replayed trace of the suite (``points``: the suite's, in order)."""
    out = []
    for p in points:
        if p.replay:  # a replayed trace: an open loop at the trace's own times
            rows = requests[requests["scenario"] == p.name] if not requests.empty else requests
            out.append(replay(p, rows, ts, metrics, engine=engine, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s))
    return out


def mark_replays(scenarios: Sequence[ScenarioSummary], points: Mapping[str, Point]) -> None:
    """Say which open-loop scenarios replayed a trace (in place): their rate is the trace's own."""
    for s in scenarios:
        point = points.get(s.scenario)
        s.replay = point is not None and point.replay


def window_table(r: ReplayResult) -> pd.DataFrame:
    """A replay's windows as ``tables/replay-<scenario>.csv`` holds them."""
    return pd.DataFrame([w.model_dump() for w in r.windows])
