"""Per-scenario figures: latency distributions with intervals, throughput, failures, goodput, server load.

Warm-up requests are left out of every figure (they are counted in ``warmup_requests``); so are the records of
superseded attempts (the caller leaves them out of ``requests``: see :mod:`cardgen.analysis.outcomes`).

**Closed loop: steady state.** A closed-loop point's figures come from its steady requests: of its successful
requests, those sent at or after its first completion and ended by the moment it stopped (its first completion
on which the user did not send again; :func:`cardgen.precision.steady_mask`, the evidence its stopping rule
uses), less the oldest of them still settling (:func:`cardgen.precision.warmup_requests`); the others
are the ramp and the drain, counted in ``ramp_drain_requests``. Its rates are over its steady window, from its
first completion (or the first steady send, after requests still settling) to its last send (the same bounds): each successful request counts in proportion to the part of its E2E inside the
window (requests/s = the sum of those fractions / the window; tokens/s weights each by its tokens), so rounds that
end together at a bound count neither twice nor half. A point with fewer steady requests than one round (its
parallel count) is too short for a steady state (it needs about three rounds): its figures keep every successful
request, its rates are over its duration as for the other kinds, and ``steady_state`` is False.
Failures count over every request the point sent. The server's gauges (KV usage, running, waiting, preemptions)
cover the whole point, ramp included.

**Precision.** A closed-loop point's ``precision`` is the relative 95 % half-width of its median speed from
start, TTFT and decode speed by batch means over whole rounds of its steady requests, in send order
(:func:`cardgen.precision.median_interval`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cardgen.analysis.adapters import adapter_figures
from cardgen.analysis.pooled import describe_gaps
from cardgen.analysis.reasoning import reasoning_figures
from cardgen.analysis.requests import gap_times
from cardgen.analysis.stats import describe
from cardgen.analysis.timeseries import counter_increase, window
from cardgen.kinds import kind_of
from cardgen.precision import MedianInterval, median_interval, steady_mask, warmup_requests
from cardgen.schemas.summary import PointPrecision, ScenarioSummary


def meets_slo(frame: pd.DataFrame, *, slo_ttft_s: float, slo_tpot_s: float) -> pd.Series:
    """Successful requests with TTFT <= ``slo_ttft_s`` and TPOT <= ``slo_tpot_s`` (a one-token answer has no
    TPOT and meets that SLO)."""
    tpot_ok = frame["tpot_s"].isna() | (frame["tpot_s"] <= slo_tpot_s)
    return frame["ok"] & (frame["ttft_s"] <= slo_ttft_s) & tpot_ok


def _sent_together(frame: pd.DataFrame) -> bool:
    """A point of scheduled sends without a recorded rate (inf is written as null by some JSON writers) was "all
    at once" when every request was scheduled (or, lacking that, sent) within 10 ms."""
    times = frame["scheduled_at"] if frame["scheduled_at"].notna().all() else frame["sent_at"]
    return bool(times.max() - times.min() <= 0.01)


def _opt(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def relative(interval: MedianInterval | None) -> float | None:
    """An interval's half-width as a fraction of its centre; None without an interval (or a centre of 0)."""
    return None if interval is None else _opt(interval.relative)


def closed_precision(steady: pd.DataFrame, *, parallel: int) -> PointPrecision:
    """Batch-means precision of a closed-loop point's medians over its steady requests (in send order)."""
    speed = median_interval(steady["speed_from_start_tok_s"].to_numpy(dtype=float), parallel=parallel)
    ttft = median_interval(steady["ttft_s"].to_numpy(dtype=float), parallel=parallel)
    decode = median_interval(steady["decode_tok_s"].to_numpy(dtype=float), parallel=parallel)
    return PointPrecision(method="batch means", speed_from_start=relative(speed), ttft=relative(ttft),
                          decode=relative(decode), batches=speed.batches if speed is not None else None)


def rows_where(frame: pd.DataFrame, mask: pd.Series) -> pd.DataFrame:
    """The rows of ``frame`` where ``mask`` holds: where every row does, ``frame`` itself as a new frame that
    copies nothing (pandas copies a column on its first write), not a second copy of a long run's rows."""
    return frame.copy(deep=False) if bool(mask.all()) else frame[mask]


def window_share(frame: pd.DataFrame, start: float, end: float) -> np.ndarray:
    """Per request, the fraction of its E2E (send to end) that lies inside ``[start, end]``."""
    sent = frame["sent_at"].to_numpy(dtype=float)
    ended = frame["end_at"].to_numpy(dtype=float)
    inside = np.clip(np.minimum(ended, end) - np.maximum(sent, start), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ended > sent, inside / (ended - sent), 0.0)


def steady_requests(ok: pd.DataFrame, *, parallel: int) -> tuple[pd.DataFrame, int]:
    """A closed-loop point's steady requests, in send order, from its successful request rows ``ok``: the ramp
    and the drain left out (:func:`cardgen.precision.steady_mask`), then the rounds still settling
    (:func:`cardgen.precision.warmup_requests`); and how many settling ones were left out."""
    mask = steady_mask(ok["sent_at"].to_numpy(dtype=float), ok["end_at"].to_numpy(dtype=float), parallel=parallel)
    steady = ok[mask].sort_values("sent_at", kind="stable")
    cut = warmup_requests([steady["speed_from_start_tok_s"].to_numpy(dtype=float),
                           steady["ttft_s"].to_numpy(dtype=float)], parallel=parallel)
    return steady.iloc[cut:], cut


def _steady(summary: ScenarioSummary, ok: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """Closed loop: the successful requests the figures come from (see the module docstring), and the send of
    the first of them when requests still settling were left out (None when none were); records the steady
    state on ``summary``."""
    users = summary.parallel or 1
    steady, cut = steady_requests(ok, parallel=users)
    summary.steady_requests = len(steady)
    summary.precision = closed_precision(steady, parallel=users)
    summary.steady_state = len(steady) >= users
    if not summary.steady_state:
        return ok, None
    summary.ramp_drain_requests = len(ok) - len(steady)
    return steady, (float(steady["sent_at"].min()) if cut else None)


def summarise_scenario(frame: pd.DataFrame, ts: pd.DataFrame, *, slo_ttft_s: float,
                       slo_tpot_s: float) -> ScenarioSummary:
    """The figures of one scenario from its request rows (``frame``, superseded records left out) and the
    server's time series."""
    first = frame.iloc[0]
    warm = frame[frame["warmup"]]
    rows = rows_where(frame, ~frame["warmup"])
    ok = rows_where(rows, rows["ok"])
    kind = kind_of(str(first["kind"]))
    parallel = rows["parallel"].max() if rows["parallel"].notna().any() else math.nan
    rate = float(first["rate_rps"])
    # sends at scheduled times (an arrival process, whatever the kind) at an infinite rate all leave at once
    scheduled = bool(frame["scheduled_at"].notna().any())
    all_at_once = scheduled and (math.isinf(rate) or (math.isnan(rate) and _sent_together(frame)))
    summary = ScenarioSummary(
        scenario=str(first["scenario"]), kind=str(first["kind"]), group=str(first["group"]), endpoint=str(first["endpoint"]),
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
    every_ok = ok
    settled_from = None
    if kind.steady_window:
        ok, settled_from = _steady(summary, ok)
    summary.prompt_tokens_mean = _opt(ok["prompt_tokens"].mean()) if len(ok) else None
    summary.output_tokens_mean = _opt(ok["output_tokens"].mean()) if len(ok) else None
    # the steady window opens at the first completion, or after the requests still settling
    opens = (settled_from if settled_from is not None else
             float(np.nanmin(every_ok["end_at"].to_numpy(dtype=float))) if len(every_ok) else math.nan)
    last_send = float(every_ok["sent_at"].max()) if len(every_ok) else math.nan
    if summary.steady_state and last_send > opens:
        # the steady window: each successful request counts for the part of it inside the window
        span = last_send - opens
        share = window_share(every_ok, opens, last_send)
        good = meets_slo(every_ok, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s).to_numpy(dtype=bool)
        out_tokens = every_ok["output_tokens"].fillna(0).to_numpy(dtype=float)
        in_tokens = every_ok["prompt_tokens"].fillna(0).to_numpy(dtype=float)
        summary.req_s = float(share.sum()) / span
        summary.output_tok_s = float((share * out_tokens).sum()) / span
        summary.total_tok_s = float((share * (out_tokens + in_tokens)).sum()) / span
        summary.goodput_req_s = float(share[good].sum()) / span
        summary.goodput_fraction = float(meets_slo(ok, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s).mean())
    elif duration > 0 and len(ok):
        good = int(meets_slo(rows, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s).sum())
        summary.req_s = len(ok) / duration
        summary.output_tok_s = float(ok["output_tokens"].sum()) / duration
        summary.total_tok_s = float(ok["output_tokens"].sum() + ok["prompt_tokens"].sum()) / duration
        summary.goodput_req_s = good / duration
        summary.goodput_fraction = good / len(rows)
    summary.ttft_s = describe(ok["ttft_s"])
    summary.e2e_s = describe(ok["e2e_s"])
    summary.tpot_s = describe(ok["tpot_s"])
    summary.itl_s = describe_gaps(gap_times(ok))  # a long run's tens of millions never in one array
    summary.decode_tok_s = describe(ok["decode_tok_s"])
    summary.speed_from_start_tok_s = describe(ok["speed_from_start_tok_s"])
    reasoning_figures(summary, ok)
    adapter_figures(summary, ok, rows)
    if scheduled:  # how late its scheduled sends left
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
    by_scenario = requests.groupby("scenario", sort=False)
    order = by_scenario["sent_at"].min().sort_values(kind="stable").index
    rows = by_scenario.indices  # each scenario's rows taken as it is summarised: one copy of them at a time
    return [summarise_scenario(requests.take(rows[name]), ts, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
            for name in order]
