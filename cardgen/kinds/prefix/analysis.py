"""The prefix cache, from the shared-prefix points (pure): the kind's analysis (:data:`ANALYSIS`, saved as
``summary.json`` ``kinds.prefix``). TTFT and ingestion speed of the cold pass (every prefix new to the server) and
the warm passes (the same prefixes again), the speed-up, and the hit rate the server itself reports.

- TTFT per request; **ingestion speed** = prompt tokens / TTFT (the whole prompt, cached part included: what a
  user sees); medians with a bootstrap 95 % interval (``cardgen.analysis.stats``).
- **speed-up** = median cold TTFT / median warm TTFT; its 95 % interval is the 2.5th and 97.5th percentiles of
  that ratio over paired bootstrap resamples of the two phases (seeded: the same run gives the same interval).
- **hit rate** = (prefix-cache hits) / (queries), both in prompt tokens: from each request's own
  ``usage.prompt_tokens_details.cached_tokens`` where the server gives it (llama.cpp; exact), else as the
  difference of the server's counters (``cardgen.engines``: vLLM's ``prefix_cache_hits`` / ``prefix_cache_queries``)
  between the last scrape before a phase's first request and the first scrape after its last; an engine with a
  hit-rate gauge instead (SGLang) gives the mean of the gauge over the phase. None where the server exposes neither.

What it saves (:class:`PrefixCache`) the card reads back (:mod:`cardgen.kinds.prefix.section`). Runs analysed
before the kinds kept their own results saved none of it (the card was made from the analysis in memory):
``cardgen render`` of such a run makes it from the run's raw files.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.stats import bootstrap_medians, describe
from cardgen.analysis.timeseries import counter_growth, gauge_mean
from cardgen.kinds.prefix.schema import PrefixParams
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import Distribution, KindResult

PHASES = ("cold", "warm")
RESAMPLES = 2000


class PhaseFigures(Saved):
    phase: str
    requests: int
    prompt_tokens: float | None  # median prompt tokens (server's count)
    ttft_s: Distribution
    ingest_tok_s: Distribution
    hit_rate: float | None  # as the server counted it over the phase
    hit_tokens: float | None  # prefix-cache hits over the phase, in tokens


class PrefixPoint(Saved):
    """One shared-prefix point: cold against warm."""

    scenario: str
    prefixes: int
    prefix_tokens: int
    suffix_tokens: int
    phases: list[PhaseFigures]
    speedup: float | None  # median cold TTFT / median warm TTFT
    speedup_ci: tuple[float, float] | None
    counters: str | None  # what the hit rate was read from, in words


class PrefixCache(KindResult):
    """Every shared-prefix point of the run that sent requests, in suite order."""

    version: int = 1
    points: list[PrefixPoint] = Field(default_factory=list)


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


def analyse(run: KindRun) -> PrefixCache | None:
    """One figure set per shared-prefix point that sent requests; None where none did."""
    engine = run.info.server.engine
    requests = run.requests
    out = []
    for point in run.points:
        params = point.params_as(PrefixParams)
        rows = requests[(requests["scenario"] == point.name)] if not requests.empty else requests
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
                q = counter_growth(run.metrics, engine=engine, role="prefix_cache_queries", start=start, end=end)
                h = counter_growth(run.metrics, engine=engine, role="prefix_cache_hits", start=start, end=end)
                if q is not None and h is not None and q.value > 0:
                    hit_rate, hit_tokens = h.value / q.value, h.value
                    counters_words = f"{h.name} / {q.name}"
                else:
                    gauge = gauge_mean(run.metrics, engine=engine, role="prefix_cache_hit_rate", start=start, end=end)
                    if gauge is not None:
                        hit_rate = gauge.value
                        counters_words = f"{gauge.name} (mean over the phase)"
            tokens = g["prompt_tokens"].to_numpy(dtype=float)
            tokens = tokens[np.isfinite(tokens)]
            phases.append(PhaseFigures(phase=phase, requests=len(g), prompt_tokens=float(np.median(tokens))
                                       if len(tokens) else None, ttft_s=describe(ttfts[phase]),
                                       ingest_tok_s=describe(ingest), hit_rate=hit_rate, hit_tokens=hit_tokens))
        cold, warm = ttfts["cold"], ttfts["warm"]
        speedup = float(np.median(cold) / np.median(warm)) if len(cold) and len(warm) and np.median(warm) > 0 \
            else None
        out.append(PrefixPoint(scenario=point.name, prefixes=params.prefixes, prefix_tokens=params.prefix_tokens,
                               suffix_tokens=params.suffix_tokens, phases=phases, speedup=speedup,
                               speedup_ci=_ratio_ci(cold, warm), counters=counters_words))
    return PrefixCache(points=out) if out else None


ANALYSIS = KindAnalysis(result=PrefixCache, analyse=analyse)
