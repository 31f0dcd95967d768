"""KV-cache capacity in tokens, several ways, and how far they agree.

1. ``server_config``: what the server declares, as its engine's adapter reads it
   (:func:`cardgen.engines.kv_config`: a gauge or info metric of the last scrape that has one, else what the
   probe read from the engine's own endpoints, ``run.json`` ``server.extra``). The adapter names the source.
2. ``usage_extrapolation``: at each scrape where the server reports a meaningful KV usage fraction u, nothing
   waiting, and as many running requests as the client has in flight, the tokens resident in those requests
   (prompt tokens + tokens generated so far, exact counts from ``usage``, placed in time by the chunk arrivals,
   rounded up to whole blocks when the block size is known) divided by u. The estimate is the median over
   those scrapes; the spread is their p25..p75.
3. then what each installed kind's own analysis estimates from its points (:class:`KVContribution`, gathered by
   :func:`cardgen.analysis.kindparts.kind_kv_estimates`, in the kinds' order): a kind that probes the cache
   (ever larger bursts until the server queues) knows its own method; this module only weighs it with the others.
   What such a probe needs of the server, :class:`KVLayout`, is read once here.

The chosen figure is the first available in that order (declared beats measured beats probed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cardgen.engines import kv_config
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import KVCapacity, KVEstimate

MIN_USAGE = 0.05  # scrapes below this usage fraction are too coarse to extrapolate from
MIN_USAGE_SAMPLES = 3


@dataclass(frozen=True)
class KVLayout:
    """How the server holds its KV cache, as far as it says: what a kind's own estimate of the capacity needs
    (given to every kind's analysis, :attr:`cardgen.analysis.kindparts.KindRun.kv`)."""

    block_size: int | None = None  # tokens per block (:func:`block_size_of`)
    slots: int | None = None  # the most requests the server runs at once, where a fixed number of slots decides it
    cache_per_slot: bool = False  # each slot holds a cache of its own (llama.cpp without a unified cache)


@dataclass(frozen=True)
class KVContribution:
    """A kind's answer to "how many tokens fit": its method's name, its estimate (None: it gave none) and its
    note (why it gave none; or what it says of the figure it gave, printed beside the estimates)."""

    method: str
    estimate: KVEstimate | None = None
    note: str | None = None


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


def kv_layout(declared: Mapping[str, Any] | None, *, slots: int | None) -> KVLayout:
    """The layout of the server's cache from what it declares (:func:`declared_kv`) and its slots
    (:func:`cardgen.engines.slot_limit`)."""
    return KVLayout(block_size=block_size_of(declared), slots=slots,
                    cache_per_slot=(declared or {}).get("kv_unified") is False)


def round_up(tokens: np.ndarray | float, block_size: int | None) -> np.ndarray | float:
    """Tokens rounded up to whole blocks of ``block_size`` (unchanged when it is unknown)."""
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
    times = chunk_times if type(chunk_times) is np.ndarray else np.asarray(chunk_times, dtype=float)
    arrived = int(times.searchsorted(t, side="right"))
    return prompt_tokens + 1 + (output_tokens - 1) * (max(arrived, 1) - 1) / (len(chunk_times) - 1)


def _resident(t: float, prompt: np.ndarray, output: np.ndarray, first: np.ndarray, chunks: np.ndarray,
              arrived: np.ndarray) -> np.ndarray:
    """:func:`resident_tokens` of many requests at once (``chunks``: how many chunks each had, ``arrived``: how
    many by ``t``), the same operations in the same order on each, so the same values to the last bit."""
    with np.errstate(divide="ignore", invalid="ignore"):
        interpolated = prompt + 1 + (output - 1) * (np.maximum(arrived, 1) - 1) / (chunks - 1)
    tokens = np.where(chunks <= 1, prompt + output, interpolated)
    tokens = np.where(np.isfinite(output), tokens, np.nan)
    return np.where(~np.isfinite(first) | (t < first), prompt, tokens)


SCRAPE_BLOCK = 4096  # scrapes whose in-flight requests are found together (a long run's pairs never all held)


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
    chunks = [c if type(c) is np.ndarray else np.asarray(c, dtype=float) for c in live["chunk_times"]]
    counts = np.array([len(c) for c in chunks], dtype=np.int64)
    usage = ts["kv_usage"].to_numpy(dtype=float)
    waiting = ts["waiting"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        qualifies = (usage >= MIN_USAGE) & ~(np.isfinite(waiting) & (waiting > 0))
    at = np.flatnonzero(qualifies)  # the scrapes that qualify, in their order
    times = ts["t"].to_numpy(dtype=float)[at]
    running = ts["running"].to_numpy(dtype=float)[at]
    # the requests sent by a scrape and not ended by then (sent <= t < end) are in flight at it: found for many
    # scrapes at once, each request's arrived chunks counted at every scrape of its life in one search
    by_send = np.argsort(sent, kind="stable")
    sends = sent[by_send]
    longest = float(np.max(end - sent)) if len(sent) else 0.0
    ratios: list[float] = []
    for lo in range(0, len(at), SCRAPE_BLOCK):
        block = slice(lo, lo + SCRAPE_BLOCK)
        near = by_send[np.searchsorted(sends, times[block].min() - longest, side="left"):
                       np.searchsorted(sends, times[block].max(), side="right")]
        ratios += _block_ratios(times[block], usage[at[block]], running[block], near, sent=sent, end=end,
                                prompt=prompt, output=output, first=first, chunks=chunks, counts=counts,
                                block_size=block_size)
    return np.asarray(ratios)


def _block_ratios(times: np.ndarray, usage: np.ndarray, running: np.ndarray, near: np.ndarray, *, sent: np.ndarray,
                  end: np.ndarray, prompt: np.ndarray, output: np.ndarray, first: np.ndarray,
                  chunks: list[np.ndarray], counts: np.ndarray, block_size: int | None) -> list[float]:
    """:func:`usage_ratios` of some qualifying scrapes (``times``, in time order, their ``usage`` and ``running``),
    among the requests ``near`` them: each scrape's ratio from its in-flight requests in their order in the frame,
    by the same operations on the same values as one scrape at a time (the same sums, to the last bit)."""
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    candidates = np.sort(near)  # in their order in the frame
    first_at = np.searchsorted(ordered, sent[candidates], side="left")  # the first scrape at or after its send
    past = np.searchsorted(ordered, end[candidates], side="left")  # the first scrape at or after its end
    spans = np.maximum(past - first_at, 0)
    req = np.repeat(candidates, spans)
    pos = np.concatenate([np.arange(a, b) for a, b in zip(first_at, past, strict=True) if b > a]) if spans.any() \
        else np.zeros(0, dtype=np.int64)
    arrived = np.concatenate([chunks[i].searchsorted(ordered[a:b], side="right")
                              for i, a, b in zip(candidates, first_at, past, strict=True) if b > a]) if spans.any() \
        else np.zeros(0, dtype=np.int64)
    scrape = order[pos]  # each pair's scrape, by its place in ``times``
    pairs = np.lexsort((req, scrape))  # by scrape, then by the request's place in the frame
    req, scrape, arrived = req[pairs], scrape[pairs], arrived[pairs].astype(np.int64)
    tokens = _resident(times[scrape], prompt[req], output[req], first[req], counts[req], arrived)
    rounded = np.asarray(round_up(tokens, block_size), dtype=float)
    bounds = np.searchsorted(scrape, np.arange(len(times) + 1), side="left")
    out: list[float] = []
    for j in range(len(times)):
        a, b = bounds[j], bounds[j + 1]
        if b == a or (math.isfinite(running[j]) and running[j] != b - a):
            continue
        if not np.isfinite(tokens[a:b]).all():
            continue
        out.append(float(np.sum(rounded[a:b])) / usage[j])
    return out


def usage_extrapolation(requests: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None) -> KVEstimate | None:
    ratios = usage_ratios(requests, ts, block_size=block_size)
    if len(ratios) < MIN_USAGE_SAMPLES:
        return None
    p25, p50, p75 = np.percentile(ratios, [25, 50, 75])
    rounding = f", rounded up to blocks of {block_size}" if block_size else ""
    return KVEstimate(method="usage_extrapolation", tokens=float(p50), low=float(p25), high=float(p75),
                      samples=len(ratios),
                      source=f"resident tokens / KV usage over {len(ratios)} scrapes{rounding}")


def kv_capacity(*, declared: Mapping[str, Any] | None, requests: pd.DataFrame, ts: pd.DataFrame,
                unknown: str | None = None, contributed: Sequence[KVContribution] = ()) -> KVCapacity:
    """Every estimate, the chosen one and their agreement, and why each method that gave none could not.
    ``declared`` is :func:`declared_kv`; ``unknown`` why the server's adapter could not read a capacity it has
    (:func:`cardgen.engines.kv_unknown`); ``contributed`` the installed kinds' own estimates, in their order."""
    block_size = block_size_of(declared)
    estimates: list[KVEstimate] = []
    not_run: dict[str, str] = {}
    notes: dict[str, str] = {}
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
    for c in contributed:
        if c.estimate is None:
            not_run[c.method] = c.note or "it gave no figure on this run"
            continue
        estimates.append(c.estimate)
        if c.note:
            notes[c.method] = c.note
    result = KVCapacity(block_size=block_size, estimates=estimates, notes=notes, not_run=not_run)
    chosen = next((e for e in estimates if e.tokens), None)
    if chosen is None:
        result.lower_bound = next((e.lower_bound for e in estimates if e.lower_bound is not None), None)
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
