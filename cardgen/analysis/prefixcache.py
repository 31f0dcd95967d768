"""The prefix cache, from the shared-prefix points (pure): TTFT and ingestion speed of the cold pass (every
prefix new to the server) and the warm passes (the same prefixes again), the speed-up, and the hit rate the
server itself reports.

- TTFT per request; **ingestion speed** = prompt tokens / TTFT (the whole prompt, cached part included: what a
  user sees); medians with a bootstrap 95 % interval (``cardgen.analysis.stats``).
- **speed-up** = median cold TTFT / median warm TTFT; its 95 % interval is the 2.5th and 97.5th percentiles of
  that ratio over paired bootstrap resamples of the two phases (seeded: the same run gives the same interval).
- **hit rate** = (prefix-cache hits) / (queries), both in prompt tokens: from each request's own
  ``usage.prompt_tokens_details.cached_tokens`` where the server gives it (llama.cpp; exact), else as the
  difference of the server's counters (``cardgen.engines``: vLLM's ``prefix_cache_hits`` / ``prefix_cache_queries``) between the last
  scrape before a phase's first request and the first scrape after its last; an engine with a hit-rate gauge
  instead (SGLang) gives the mean of the gauge over the phase. None where the server exposes neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen.analysis.stats import bootstrap_medians, describe
from cardgen.engines import counter, metric_names
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import Distribution

PHASES = ("cold", "warm")
RESAMPLES = 2000


@dataclass(frozen=True)
class PhaseFigures:
    phase: str
    requests: int
    prompt_tokens: float | None  # median prompt tokens (server's count)
    ttft_s: Distribution
    ingest_tok_s: Distribution
    hit_rate: float | None  # as the server counted it over the phase
    hit_tokens: float | None  # prefix-cache hits over the phase, in tokens


@dataclass(frozen=True)
class PrefixCacheResult:
    scenario: str
    prefixes: int
    prefix_tokens: int
    suffix_tokens: int
    phases: list[PhaseFigures]
    speedup: float | None  # median cold TTFT / median warm TTFT
    speedup_ci: tuple[float, float] | None
    counters: str | None  # what the hit rate was read from, in words


def _ratio_ci(cold: np.ndarray, warm: np.ndarray, *, seed: int = 0) -> tuple[float, float] | None:
    if len(cold) < 2 or len(warm) < 2:
        return None
    c = bootstrap_medians(cold, resamples=RESAMPLES, seed=seed)
    w = bootstrap_medians(warm, resamples=RESAMPLES, seed=seed + 1)
    ratio = c / np.where(w > 0, w, np.nan)
    ratio = ratio[np.isfinite(ratio)]
    if not len(ratio):
        return None
    lo, hi = np.quantile(ratio, [0.025, 0.975])
    return float(lo), float(hi)


def _window_delta(metrics: Sequence[MetricSample], name: str, start: float, end: float) -> float | None:
    """The counter's growth from the last scrape before ``start`` to the first after ``end``."""
    if not name:
        return None
    ok = [m for m in metrics if m.error is None]
    before = [m for m in ok if (m.t_end or m.t) <= start]
    after = [m for m in ok if m.t >= end]
    if not before or not after:
        return None
    a, b = counter(before[-1], name), counter(after[0], name)
    return None if a is None or b is None else b - a


def _gauge_mean(metrics: Sequence[MetricSample], name: str, start: float, end: float) -> float | None:
    if not name:
        return None
    values = [counter(m, name) for m in metrics if m.error is None and start <= m.t <= end]
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def prefix_cache(requests: pd.DataFrame, metrics: Sequence[MetricSample], *, engine: str | None,
                 points: Sequence[tuple[str, int, int, int]]) -> list[PrefixCacheResult]:
    """One result per shared-prefix point that sent requests; ``points`` are (name, prefixes, prefix tokens,
    suffix tokens) of the run's shared-prefix points."""
    names = metric_names(engine)
    queries_name, hits_name = names.get("prefix_cache_queries", ""), names.get("prefix_cache_hits", "")
    rate_name = names.get("prefix_cache_hit_rate", "")
    out = []
    for name, prefixes, prefix_tokens, suffix_tokens in points:
        rows = requests[(requests["scenario"] == name)] if not requests.empty else requests
        if rows.empty:
            continue
        phases, ttfts = [], {}
        counters_words = None
        for phase in PHASES:
            g = rows[(rows["phase"] == phase) & rows["ok"]]
            ttft = g["ttft_s"].to_numpy(dtype=float)
            ttfts[phase] = ttft[np.isfinite(ttft)]
            ingest = (g["prompt_tokens"] / g["ttft_s"]).to_numpy(dtype=float)
            every = rows[rows["phase"] == phase]
            hit_rate = hit_tokens = None
            cached = g["cached_tokens"].to_numpy(dtype=float) if "cached_tokens" in g else np.empty(0)
            if len(g) and np.isfinite(cached).all() and g["prompt_tokens"].sum() > 0:  # the server's own per request
                hit_tokens = float(cached.sum())
                hit_rate = hit_tokens / float(g["prompt_tokens"].sum())
                counters_words = "usage.prompt_tokens_details.cached_tokens of each request"
            elif len(every):
                start, end = float(every["sent_at"].min()), float(every["end_at"].max())
                q = _window_delta(metrics, queries_name, start, end)
                h = _window_delta(metrics, hits_name, start, end)
                if q is not None and h is not None and q > 0:
                    hit_rate, hit_tokens = h / q, h
                    counters_words = f"{hits_name} / {queries_name}"
                elif rate_name:
                    hit_rate = _gauge_mean(metrics, rate_name, start, end)
                    if hit_rate is not None:
                        counters_words = f"{rate_name} (mean over the phase)"
            tokens = g["prompt_tokens"].to_numpy(dtype=float)
            tokens = tokens[np.isfinite(tokens)]
            phases.append(PhaseFigures(phase=phase, requests=len(g), prompt_tokens=float(np.median(tokens))
                                       if len(tokens) else None, ttft_s=describe(ttfts[phase]),
                                       ingest_tok_s=describe(ingest), hit_rate=hit_rate, hit_tokens=hit_tokens))
        cold, warm = ttfts["cold"], ttfts["warm"]
        speedup = float(np.median(cold) / np.median(warm)) if len(cold) and len(warm) and np.median(warm) > 0 \
            else None
        out.append(PrefixCacheResult(scenario=name, prefixes=prefixes, prefix_tokens=prefix_tokens,
                                     suffix_tokens=suffix_tokens, phases=phases, speedup=speedup,
                                     speedup_ci=_ratio_ci(cold, warm), counters=counters_words))
    return out
