"""KV-cache capacity in tokens, three ways, and how far they agree.

1. ``server_config``: what the server declares, as its engine's adapter reads it
   (:func:`cardgen.engines.kv_config`: a gauge or info metric of the last scrape that has one, else what the
   probe read from the engine's own endpoints, ``run.json`` ``server.extra``). The adapter names the source.
2. ``usage_extrapolation``: at each scrape where the server reports a meaningful KV usage fraction u, nothing
   waiting, and as many running requests as the client has in flight, the tokens resident in those requests
   (prompt tokens + tokens generated so far, exact counts from ``usage``, placed in time by the chunk arrivals,
   rounded up to whole blocks when the block size is known) divided by u. The estimate is the median over
   those scrapes; the spread is their p25..p75.
3. ``saturation_probe``: waves of requests sent at once (doubling, then bisecting: ``points.WaveSearch``; or
   stepped). The smallest wave in which requests queue or are preempted, and the largest smaller one in which
   none did, bracket the capacity, times the tokens each request holds at its end (prompt + output). The
   estimate is the middle of the bracket; with no saturation the largest wave gives only a lower bound.

The chosen figure is the first available in that order (declared beats measured beats probed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cardgen.analysis.timeseries import counter_increase, window
from cardgen.engines import kv_config
from cardgen.kinds import kinds_where
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import KVCapacity, KVEstimate, WaveResult

MIN_USAGE = 0.05  # scrapes below this usage fraction are too coarse to extrapolate from
MIN_USAGE_SAMPLES = 3
KV_FULL_USAGE = 0.9  # a wave that queues below this usage is limited by something other than the KV cache


def declared_kv(metrics: Sequence[MetricSample], *, engine: str | None,
                server_extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the server declares about its KV cache (``tokens``, ``source``, ``block_size``...: see
    :func:`cardgen.engines.kv_config`), from the last scrape that says it (a server may resize its cache once
    warmed up), else from ``server_extra`` alone; None when neither says."""
    said = next((s for s in reversed(metrics) if s.error is None and s.samples and kv_config(engine, s)), None)
    return kv_config(engine, said, server_extra)


def block_size_of(declared: Mapping[str, Any] | None) -> int | None:
    """Tokens per KV block when the server says, and a block holds more than one token (SGLang's default page
    of one token rounds nothing)."""
    size = (declared or {}).get("block_size")
    return int(size) if isinstance(size, int) and size > 1 else None


def _round_up(tokens: np.ndarray | float, block_size: int | None) -> np.ndarray | float:
    if not block_size:
        return tokens
    return np.ceil(np.asarray(tokens, dtype=float) / block_size) * block_size


def resident_tokens(t: float, *, prompt_tokens: float, output_tokens: float, first_token_at: float,
                    chunk_times: np.ndarray) -> float:
    """Tokens a request holds in the KV cache at time ``t`` (while it is in flight): its prompt, plus the
    output tokens generated so far, interpolated over its chunk arrivals so that the last chunk means all
    ``output_tokens``."""
    if not math.isfinite(first_token_at) or t < first_token_at:
        return prompt_tokens
    if not math.isfinite(output_tokens):
        return math.nan
    if len(chunk_times) <= 1:
        return prompt_tokens + output_tokens
    arrived = int(np.searchsorted(chunk_times, t, side="right"))
    return prompt_tokens + 1 + (output_tokens - 1) * (max(arrived, 1) - 1) / (len(chunk_times) - 1)


def usage_ratios(requests: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None) -> np.ndarray:
    """Resident tokens / usage fraction at every scrape that qualifies (see the module docstring)."""
    if ts.empty or ts["kv_usage"].isna().all() or requests.empty:
        return np.empty(0)
    live = requests[np.isfinite(requests["end_at"].to_numpy(dtype=float))]
    sent = live["sent_at"].to_numpy(dtype=float)
    end = live["end_at"].to_numpy(dtype=float)
    prompt = live["prompt_tokens"].fillna(live["prompt_tokens_target"].astype(float)).to_numpy(dtype=float)
    output = live["output_tokens"].to_numpy(dtype=float)
    first = live["first_token_at"].to_numpy(dtype=float)
    chunks = list(live["chunk_times"])
    ratios = []
    for sample in ts.itertuples(index=False):
        u = sample.kv_usage
        if not (u >= MIN_USAGE) or (math.isfinite(sample.waiting) and sample.waiting > 0):
            continue
        inflight = np.flatnonzero((sent <= sample.t) & (sample.t < end))
        if len(inflight) == 0 or (math.isfinite(sample.running) and sample.running != len(inflight)):
            continue
        tokens = np.array([resident_tokens(sample.t, prompt_tokens=prompt[i], output_tokens=output[i],
                                           first_token_at=first[i], chunk_times=chunks[i]) for i in inflight])
        if not np.isfinite(tokens).all():
            continue
        ratios.append(float(np.sum(_round_up(tokens, block_size))) / u)
    return np.asarray(ratios)


def usage_extrapolation(requests: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None) -> KVEstimate | None:
    ratios = usage_ratios(requests, ts, block_size=block_size)
    if len(ratios) < MIN_USAGE_SAMPLES:
        return None
    p25, p50, p75 = np.percentile(ratios, [25, 50, 75])
    rounding = f", rounded up to blocks of {block_size}" if block_size else ""
    return KVEstimate(method="usage_extrapolation", tokens=float(p50), low=float(p25), high=float(p75),
                      samples=len(ratios),
                      source=f"resident tokens / KV usage over {len(ratios)} scrapes{rounding}")


def _wave_result(rows: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None, has_load_metrics: bool,
                 ) -> WaveResult:
    ok = rows[rows["ok"]]
    tokens = (ok["prompt_tokens"].fillna(ok["prompt_tokens_target"].astype(float))
              + ok["output_tokens"].fillna(ok["output_tokens_target"].astype(float)))
    tpr = float(_round_up(float(tokens.median()), block_size)) if len(tokens) else None
    start, end = float(rows["sent_at"].min()), float(np.nanmax(rows["end_at"].to_numpy(dtype=float)))
    result = WaveResult(wave=int(rows["wave"].iloc[0]), size=len(rows), tokens_per_request=tpr)
    ends = np.sort(ok["end_at"].to_numpy(dtype=float))
    if len(ends) >= 2:
        first_end = ends[0]
        for f, e in zip(ok["first_token_at"], ok["end_at"], strict=True):
            other_first_end = ends[1] if e == first_end else first_end
            if f > other_first_end:
                result.queued = True
                break
    # waiting for the prefill budget of a step (and decoding stalled behind a long prefill step) is normal at
    # the start of a wave; once every request has started generating, or one has finished, requests that wait
    # or stall are waiting for KV blocks (or slots)
    firsts = ok["first_token_at"].to_numpy(dtype=float)
    settled = math.inf
    if len(firsts) and np.isfinite(firsts).all():
        settled = min(float(firsts.max()), float(ends[0]) if len(ends) else math.inf)
    win = window(ts, start, end)
    if not win.empty:
        result.kv_usage_max = float(win["kv_usage"].max()) if win["kv_usage"].notna().any() else None
        result.waiting = bool((win.loc[win["t"] > settled, "waiting"].fillna(0) > 0).any())
    result.preempted = bool((counter_increase(ts, "preemptions", start, end) or 0) > 0)
    if not has_load_metrics:
        times = [t for t in ok["chunk_times"] if len(t) > 2]
        if times:
            typical = float(np.median(np.concatenate([np.diff(t) for t in times])))
            limit = max(10 * typical, 0.25)
            result.stalled = any(bool(np.any((np.diff(t) > limit) & (t[:-1] >= settled))) for t in times)
    return result


def saturation_probe(requests: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None,
                     slots: int | None = None, cache_per_slot: bool = False,
                     ) -> tuple[KVEstimate | None, list[WaveResult], str | None]:
    """(estimate, the waves, a note when the probe could not give a figure). ``slots``: the most requests the
    server runs at once (llama.cpp's slots): a wave larger than that queues for a slot, whatever its KV cache.
    ``cache_per_slot``: each slot holds a cache of its own (llama.cpp without a unified cache), so a request that
    fits a slot never waits for KV, only for a slot: no wave can saturate the cache, and one that seems to have
    (a small wave of requests too short to overlap: on a fast server the second starts after the first ended) is
    no measure of it."""
    rows = requests[requests["kind"].isin(kinds_where(lambda k: k.capacity_probe)) & ~requests["warmup"] & requests["wave"].notna()]
    if rows.empty:
        return None, [], None
    has_load = not ts.empty and not ts[["waiting", "preemptions", "running"]].isna().all().all()
    scenario = rows.groupby("scenario", sort=False)["sent_at"].min().sort_values(kind="stable").index[0]
    rows = rows[rows["scenario"] == scenario]
    waves = [
        _wave_result(g, ts, block_size=block_size, has_load_metrics=has_load)
        for _, g in sorted(rows.groupby("wave"), key=lambda item: float(item[1]["sent_at"].min()))
    ]
    if slots and cache_per_slot:
        largest = max(w.size for w in waves)
        return None, waves, (f"each of the server's {slots} slots holds a cache of its own and every request fits "
                             f"one: requests queue behind the server's {slots} slots, never for KV blocks, so the "
                             f"waves (up to {largest} requests) measured its slots, not its KV cache")
    # waves may come in any order (a bisecting search): the smallest wave that saturated, and the largest
    # below it that did not, bracket the capacity
    saturated = sorted((w for w in waves if w.saturated and w.tokens_per_request), key=lambda w: w.size)
    first = saturated[0] if saturated else None
    calm = [w for w in waves if not w.saturated and (first is None or w.size < first.size)]
    previous = max(calm, key=lambda w: w.size) if calm else None
    if first is not None:
        if slots and first.size > slots and (previous is None or previous.size <= slots):
            note = (f"wave {first.wave} ({first.size} requests) queued behind the server's {slots} slots: it runs at "
                    f"most {slots} requests at once, so the waves measured its slots, not its KV cache")
            return None, waves, note
        if first.kv_usage_max is not None and first.kv_usage_max < KV_FULL_USAGE:
            note = (f"wave {first.wave} ({first.size} requests) queued at {first.kv_usage_max:.0%} KV usage: "
                    "limited by something other than the KV cache (max_num_seqs?)")
            return None, waves, note
        # a calm wave none of whose requests succeeded has no tokens per request: it bounds nothing
        low = (previous.size * previous.tokens_per_request) if previous and previous.tokens_per_request else 0.0
        high = first.size * (first.tokens_per_request or 0.0)  # never 0: saturated keeps the waves that have one
        signals = [s for s in ("queued", "preempted", "waiting", "stalled") if getattr(first, s)]
        before = f"the wave of {previous.size} did not" if previous else "no smaller wave ran"
        return (KVEstimate(method="saturation_probe", tokens=(low + high) / 2, low=low, high=high,
                           samples=len(waves),
                           source=f"wave of {first.size} x {first.tokens_per_request:.0f} tokens saturated "
                                  f"({', '.join(signals)}); {before}"),
                waves, None)
    if previous is None or not previous.tokens_per_request:
        return None, waves, "no wave completed without saturating"
    bound = previous.size * previous.tokens_per_request
    note = f"waves up to {previous.size} requests never saturated: capacity is at least {bound:,.0f} tokens"
    return (KVEstimate(method="saturation_probe", lower_bound=bound, samples=len(waves),
                       source=f"largest wave without saturation: {previous.size} x "
                              f"{previous.tokens_per_request:.0f} tokens"), waves, note)


def kv_capacity(*, declared: Mapping[str, Any] | None, requests: pd.DataFrame, ts: pd.DataFrame,
                unknown: str | None = None, slots: int | None = None) -> KVCapacity:
    """Every estimate, the chosen one and their agreement, and why each method that gave none could not.
    ``declared`` is :func:`declared_kv`; ``unknown`` why the server's adapter could not read a capacity it has
    (:func:`cardgen.engines.kv_unknown`); ``slots`` the most requests the server runs at once, where a fixed
    number of slots decides it."""
    block_size = block_size_of(declared)
    estimates: list[KVEstimate] = []
    not_run: dict[str, str] = {}
    if declared is not None:
        estimates.append(KVEstimate(method="server_config", tokens=float(declared["tokens"]), samples=1,
                                    source=str(declared["source"])))
    else:
        not_run["server_config"] = unknown or "the server declares no KV capacity (no metric or endpoint says it)"
    usage = usage_extrapolation(requests, ts, block_size=block_size)
    if usage is not None:
        estimates.append(usage)
    else:
        not_run["usage_extrapolation"] = _why_no_usage(ts)
    probe, waves, note = saturation_probe(requests, ts, block_size=block_size, slots=slots,
                                          cache_per_slot=(declared or {}).get("kv_unified") is False)
    if probe is not None:
        estimates.append(probe)
    else:
        not_run["saturation_probe"] = note or "the suite has no growing waves"
    result = KVCapacity(block_size=block_size, estimates=estimates, waves=waves, saturation_note=note,
                        not_run=not_run)
    chosen = next((e for e in estimates if e.tokens), None)
    if chosen is None:
        result.lower_bound = probe.lower_bound if probe is not None else None
        return result
    result.tokens, result.method = chosen.tokens, chosen.method
    base = chosen.tokens or math.nan  # never NaN: chosen for its tokens
    others = []
    for e in estimates:
        if e.tokens:
            e.vs_chosen_pct = 100 * (e.tokens - base) / base
            if e is not chosen:
                others.append(abs(e.vs_chosen_pct))
    result.agreement_pct = max(others) if others else None
    return result


def _why_no_usage(ts: pd.DataFrame) -> str:
    if ts.empty:
        return "the server has no /metrics to read a KV usage from"
    if ts["kv_usage"].isna().all():
        return "the server's /metrics has no KV-usage gauge"
    return (f"fewer than {MIN_USAGE_SAMPLES} scrapes with a KV usage of at least {MIN_USAGE:.0%}, nothing waiting and "
            "the server running exactly the requests in flight")
