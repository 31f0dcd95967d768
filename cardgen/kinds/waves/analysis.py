"""The saturation probe (pure): the kind's analysis (:data:`ANALYSIS`, saved as ``summary.json`` ``kinds.waves``)
and its estimate of the KV cache's capacity, which the analysis weighs with the server's own figures
(:func:`cardgen.analysis.kv.kv_capacity`, as ``kv_cache``'s method ``saturation_probe``).

Waves of requests are sent at once (doubling, then bisecting: the program's search; or stepped). The smallest wave
in which requests queue or are preempted, and the largest smaller one in which none did, bracket the capacity,
times the tokens each request holds at its end (prompt + output, rounded up to whole blocks when the block size is
known). The estimate is the middle of the bracket; with no saturation the largest wave gives only a lower bound. A
wave that queued below :data:`cardgen.saturation.WATCHED_FULL_USAGE` KV usage, or behind the server's slots, measured
something other than the KV cache, and gives no figure (the note says which).

Files written before the kind kept its own result held the waves and the note in ``kv_cache`` (``waves``,
``saturation_note``): they still load, without the waves' table (``kinds.waves`` is absent), and their chosen
estimate, ``kv_cache.estimates``, is unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import Field, computed_field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.kv import KVContribution, round_up
from cardgen.analysis.timeseries import counter_increase, window
from cardgen.saturation import WATCHED_FULL_USAGE
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult, KVEstimate

METHOD = "saturation_probe"  # its name among kv_cache's estimates


class WaveResult(Saved):
    """One wave of the saturation probe, as the card's table shows it."""

    wave: int
    size: int
    tokens_per_request: float | None = None
    queued: bool = False  # a request got its first token only after another of the wave had finished
    preempted: bool = False  # the server's preemption counter rose during the wave
    waiting: bool = False  # the server reported waiting requests once all had started or one had finished
    stalled: bool = False  # (no server metrics) a chunk gap far longer than the wave's typical gap
    kv_usage_max: float | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's way; mypy allows no decorator over a property
    @property
    def saturated(self) -> bool:
        return self.queued or self.preempted or self.waiting or self.stalled


def _wave(extra: object) -> float:
    """A request's wave (the record's own field ``extra.wave``: the size of the wave it was sent in), NaN for a
    request of no wave."""
    wave = extra.get("wave") if isinstance(extra, dict) else None
    return float(wave) if wave is not None else float("nan")


def _wave_result(rows: pd.DataFrame, ts: pd.DataFrame, *, block_size: int | None, has_load_metrics: bool,
                 ) -> WaveResult:
    ok = rows[rows["ok"]]
    tokens = (ok["prompt_tokens"].fillna(ok["prompt_tokens_target"].astype(float))
              + ok["output_tokens"].fillna(ok["output_tokens_target"].astype(float)))
    tpr = float(round_up(float(tokens.median()), block_size)) if len(tokens) else None
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
    """(estimate, the waves, a note when the probe could not give a figure, or on the bound it gave) of the waves
    among ``requests`` (rows with a ``wave``, warm-ups left out). ``slots``: the most requests the
    server runs at once (llama.cpp's slots): a wave larger than that queues for a slot, whatever its KV cache.
    ``cache_per_slot``: each slot holds a cache of its own (llama.cpp without a unified cache), so a request that
    fits a slot never waits for KV, only for a slot: no wave can saturate the cache, and one that seems to have
    (a small wave of requests too short to overlap: on a fast server the second starts after the first ended) is
    no measure of it."""
    requests = requests.assign(wave=requests["extra"].map(_wave))
    rows = requests[~requests["warmup"] & requests["wave"].notna()]
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
        if first.kv_usage_max is not None and first.kv_usage_max < WATCHED_FULL_USAGE:
            note = (f"wave {first.wave} ({first.size} requests) queued at {first.kv_usage_max:.0%} KV usage: "
                    "limited by something other than the KV cache (max_num_seqs?)")
            return None, waves, note
        # a calm wave none of whose requests succeeded has no tokens per request: it bounds nothing
        low = (previous.size * previous.tokens_per_request) if previous and previous.tokens_per_request else 0.0
        high = first.size * (first.tokens_per_request or 0.0)  # never 0: saturated keeps the waves that have one
        signals = [s for s in ("queued", "preempted", "waiting", "stalled") if getattr(first, s)]
        before = f"the wave of {previous.size} did not" if previous else "no smaller wave ran"
        return (KVEstimate(method=METHOD, tokens=(low + high) / 2, low=low, high=high,
                           samples=len(waves),
                           source=f"wave of {first.size} x {first.tokens_per_request:.0f} tokens saturated "
                                  f"({', '.join(signals)}); {before}"),
                waves, None)
    if previous is None or not previous.tokens_per_request:
        return None, waves, "no wave completed without saturating"
    bound = previous.size * previous.tokens_per_request
    note = f"waves up to {previous.size} requests never saturated: capacity is at least {bound:,.0f} tokens"
    return (KVEstimate(method=METHOD, lower_bound=bound, samples=len(waves),
                       source=f"largest wave without saturation: {previous.size} x "
                              f"{previous.tokens_per_request:.0f} tokens"), waves, note)


class SaturationProbe(KindResult):
    """The kind's result: the waves of the run's first waves point, in the order they ran, the probe's estimate
    of the KV capacity (None: it gave none) and its note (why it gave none, or what its bound means)."""

    version: int = 1
    waves: list[WaveResult] = Field(default_factory=list)
    estimate: KVEstimate | None = None
    note: str | None = None


def probe(run: KindRun) -> SaturationProbe | None:
    """The probe over the kind's points of the run (None: none of them sent a wave)."""
    kv = run.kv
    estimate, waves, note = saturation_probe(run.requests, run.timeseries, block_size=kv.block_size, slots=kv.slots,
                                             cache_per_slot=kv.cache_per_slot)
    if not waves:
        return None
    return SaturationProbe(waves=waves, estimate=estimate, note=note)


def kv_estimate(result: SaturationProbe | None) -> KVContribution:
    """The probe's figure for the KV headline (a run without waves says so)."""
    if result is None:
        return KVContribution(METHOD, note="the suite has no growing waves")
    return KVContribution(METHOD, estimate=result.estimate, note=result.note)


ANALYSIS = KindAnalysis(result=SaturationProbe, analyse=probe, kv_estimate=kv_estimate)
