"""The closed loop's own analysis (:data:`ANALYSIS`): its capacity thresholds per prompt / output pair, saved in
summary.json's ``kinds["closed"]`` (older files held them at the top level, ``capacity``), and FlexGen's scale
table of its points (``tables/scale.json|csv``). Its points' common figures (speed from start, TTFT, throughput
over the steady window) are every point's rows of ``scenarios``; the generation headline is read from them
(``Kind.headlines``).

Capacity thresholds, per (prompt, output) pair:

- the most parallel requests that keep the median speed from start >= ``min_speed_tok_s``: the largest tested
  parallel count such that it and every smaller tested count pass;
- the most parallel requests that keep the server's KV usage < ``max_kv_usage`` (same rule, from the largest
  usage the server reported during each point).

A point where every request failed does not pass; a point without the figure (no usage gauge) makes the
threshold unknown. When every tested count passes the bound is open (the server may sustain more than was tested).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.kinds.closed import CLOSED
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult, ScenarioSummary, Summary
from cardgen.sweeps import sweep_pairs


class CapacityThreshold(Saved):
    """Per (prompt, output) pair of the closed loop: how many parallel requests the server sustains."""

    prompt_tokens: int
    output_tokens: int
    parallel_tested: list[int] = Field(default_factory=list)
    min_speed_tok_s: float
    max_parallel_at_min_speed: int | None = None  # most parallel with median speed from start >= min
    speed_bound_open: bool = False  # every tested point passed: the true limit is higher
    max_kv_usage: float
    max_parallel_below_kv_usage: int | None = None  # most parallel with max KV usage < max_kv_usage
    kv_bound_open: bool = False


class ClosedResult(KindResult):
    """What the closed loop's analysis saves: a capacity threshold per prompt / output pair it ran."""

    capacity: list[CapacityThreshold] = Field(default_factory=list)


def _largest_passing(points: list[tuple[int, bool | None]]) -> tuple[int | None, bool]:
    """(largest count whose prefix all passes, whether every point passed); None when unknown."""
    if not points or any(passed is None for _, passed in points):
        return None, False
    best = 0
    for parallel, passed in points:
        if not passed:
            return best, False
        best = parallel
    return best, True


def _speed_passes(s: ScenarioSummary, min_speed_tok_s: float) -> bool | None:
    if s.failed == s.requests:
        return False  # nothing succeeded: the server did not sustain this point
    return None if s.speed_from_start_tok_s.p50 is None else s.speed_from_start_tok_s.p50 >= min_speed_tok_s


def capacity_thresholds(scenarios: Sequence[ScenarioSummary], *, min_speed_tok_s: float,
                        max_kv_usage: float) -> list[CapacityThreshold]:
    """One threshold per (prompt, output) pair with at least one closed-loop point, ordered by the pair."""
    out = []
    for (prompt, output), points in sweep_pairs(scenarios, CLOSED.name).items():
        speed = [(s.parallel or 0, _speed_passes(s, min_speed_tok_s)) for s in points]
        kv = [(s.parallel or 0, None if s.kv_usage_max is None else s.kv_usage_max < max_kv_usage) for s in points]
        max_speed, speed_open = _largest_passing(speed)
        max_kv, kv_open = _largest_passing(kv)
        out.append(CapacityThreshold(
            prompt_tokens=prompt, output_tokens=output, parallel_tested=[s.parallel or 0 for s in points],
            min_speed_tok_s=min_speed_tok_s, max_parallel_at_min_speed=max_speed, speed_bound_open=speed_open,
            max_kv_usage=max_kv_usage, max_parallel_below_kv_usage=max_kv, kv_bound_open=kv_open,
        ))
    return out


def scale_table(scenarios: Sequence[ScenarioSummary], *, kv_cache_tokens: float | None) -> pd.DataFrame:
    """FlexGen's scale table: closed-loop points ordered by pair then parallel count."""
    points = [s for pts in sweep_pairs(scenarios, CLOSED.name).values() for s in pts]
    rows = []
    for s in points:
        usage = s.kv_usage_max
        rows.append({
            "Parallel": s.parallel, "Prompt tokens": s.prompt_tokens, "Output tokens": s.output_tokens,
            "Latency p50 (s)": s.e2e_s.p50, "Output tput (tok/s)": s.output_tok_s,
            "Total tput (tok/s)": s.total_tok_s,
            "Speed per request p50 (tok/s)": s.speed_from_start_tok_s.p50,
            "Peak KV usage (%)": None if usage is None else 100 * usage,
            "Peak KV (tokens)": None if usage is None or kv_cache_tokens is None else usage * kv_cache_tokens,
        })
    return pd.DataFrame(rows)


def analyse(run: KindRun) -> ClosedResult | None:
    """The capacity thresholds of the run's closed-loop points (None: no point sent a request)."""
    capacity = capacity_thresholds(run.scenarios, min_speed_tok_s=run.options.min_speed_tok_s,
                                   max_kv_usage=run.options.max_kv_usage)
    return ClosedResult(capacity=capacity) if capacity else None


def tables(result: ClosedResult, s: Summary) -> Mapping[str, pd.DataFrame]:
    """FlexGen's scale table of the run's closed-loop points."""
    return {"scale": scale_table(s.scenarios, kv_cache_tokens=s.kv_cache.tokens)}


ANALYSIS = KindAnalysis(result=ClosedResult, analyse=analyse, tables=tables,
                        absent="no closed-loop points: no generation speed or throughput against parallel requests")
