"""Per-scenario figures: latency distributions with intervals, throughput, failures, goodput, server load.

Warm-up requests are left out of every figure (they are counted in ``warmup_requests``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from cardgen.analysis.requests import chunk_gaps
from cardgen.analysis.stats import describe
from cardgen.analysis.summary import ScenarioSummary
from cardgen.analysis.timeseries import counter_increase, window


def meets_slo(frame: pd.DataFrame, *, slo_ttft_s: float, slo_tpot_s: float) -> pd.Series:
    """Successful requests with TTFT <= ``slo_ttft_s`` and TPOT <= ``slo_tpot_s`` (a one-token answer has no
    TPOT and meets that SLO)."""
    tpot_ok = frame["tpot_s"].isna() | (frame["tpot_s"] <= slo_tpot_s)
    return frame["ok"] & (frame["ttft_s"] <= slo_ttft_s) & tpot_ok


def _sent_together(frame: pd.DataFrame) -> bool:
    """An open-loop point without a recorded rate (inf is written as null by some JSON writers) was "all at
    once" when every request was scheduled (or, lacking that, sent) within 10 ms."""
    times = frame["scheduled_at"] if frame["scheduled_at"].notna().all() else frame["sent_at"]
    return bool(times.max() - times.min() <= 0.01)


def _opt(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def summarise_scenario(frame: pd.DataFrame, ts: pd.DataFrame, *, slo_ttft_s: float,
                       slo_tpot_s: float) -> ScenarioSummary:
    """The figures of one scenario from its request rows (``frame``) and the server's time series."""
    first = frame.iloc[0]
    warm = frame[frame["warmup"]]
    rows = frame[~frame["warmup"]]
    ok = rows[rows["ok"]]
    kind = str(first["kind"])
    parallel = rows["parallel"].max() if rows["parallel"].notna().any() else math.nan
    rate = float(first["rate_rps"])
    all_at_once = kind == "open" and (math.isinf(rate) or (math.isnan(rate) and _sent_together(frame)))
    summary = ScenarioSummary(
        scenario=str(first["scenario"]), kind=kind, group=str(first["group"]), endpoint=str(first["endpoint"]),
        prompt_tokens=int(first["prompt_tokens_target"]), output_tokens=int(first["output_tokens_target"]),
        parallel=int(parallel) if math.isfinite(parallel) else None,
        rate_rps=rate if math.isfinite(rate) else None, all_at_once=all_at_once,
        requests=len(rows), warmup_requests=len(warm), failed=int((~rows["ok"]).sum()),
    )
    if rows.empty:
        return summary
    summary.failure_rate = summary.failed / len(rows)
    summary.failures_by_kind = {str(k): int(v) for k, v in
                                rows.loc[~rows["ok"], "error_kind"].value_counts().sort_index().items()}
    start, end = float(rows["sent_at"].min()), float(np.nanmax(rows["end_at"].to_numpy()))
    if not math.isfinite(end):
        end = start
    duration = end - start
    summary.started_unix, summary.ended_unix, summary.duration_s = start, end, duration
    summary.prompt_tokens_mean = _opt(ok["prompt_tokens"].mean()) if len(ok) else None
    summary.output_tokens_mean = _opt(ok["output_tokens"].mean()) if len(ok) else None
    if duration > 0 and len(ok):
        good = int(meets_slo(rows, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s).sum())
        summary.req_s = len(ok) / duration
        summary.output_tok_s = float(ok["output_tokens"].sum()) / duration
        summary.total_tok_s = float(ok["output_tokens"].sum() + ok["prompt_tokens"].sum()) / duration
        summary.goodput_req_s = good / duration
        summary.goodput_fraction = good / len(rows)
    summary.ttft_s = describe(ok["ttft_s"])
    summary.e2e_s = describe(ok["e2e_s"])
    summary.tpot_s = describe(ok["tpot_s"])
    summary.itl_s = describe(chunk_gaps(ok))
    summary.decode_tok_s = describe(ok["decode_tok_s"])
    summary.speed_from_start_tok_s = describe(ok["speed_from_start_tok_s"])
    if kind == "open":
        summary.send_lag_s = describe(rows["send_lag_s"], ci=False)
    win = window(ts, start, end)
    if not win.empty:
        summary.kv_usage_max = _opt(win["kv_usage"].max())
        summary.kv_usage_mean = _opt(win["kv_usage"].mean())
        summary.running_max = _opt(win["running"].max())
        summary.waiting_max = _opt(win["waiting"].max())
    summary.preemptions = counter_increase(ts, "preemptions", start, end)
    return summary


def scenario_summaries(requests: pd.DataFrame, ts: pd.DataFrame, *, slo_ttft_s: float,
                       slo_tpot_s: float) -> list[ScenarioSummary]:
    """Every scenario of the run, in the order it started."""
    if requests.empty:
        return []
    order = requests.groupby("scenario", sort=False)["sent_at"].min().sort_values(kind="stable").index
    groups = dict(tuple(requests.groupby("scenario", sort=False)))
    return [summarise_scenario(groups[name], ts, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s) for name in order]


def closed_pairs(scenarios: Sequence[ScenarioSummary]) -> dict[tuple[int, int], list[ScenarioSummary]]:
    """Closed-loop points with at least one request, per (prompt, output) pair in ascending order, each list
    ordered by parallel count."""
    pairs: dict[tuple[int, int], list[ScenarioSummary]] = {}
    for s in scenarios:
        if s.kind == "closed" and s.parallel is not None and s.requests > 0:
            pairs.setdefault((s.prompt_tokens, s.output_tokens), []).append(s)
    return {k: sorted(v, key=lambda s: s.parallel or 0) for k, v in sorted(pairs.items())}
