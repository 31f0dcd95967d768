"""Capacity thresholds per (prompt, output) pair of the closed loop.

- the most parallel requests that keep the median speed from start >= ``min_speed_tok_s``: the largest tested
  parallel count such that it and every smaller tested count pass;
- the most parallel requests that keep the server's KV usage < ``max_kv_usage`` (same rule, from the largest
  usage the server reported during each point).

A point where every request failed does not pass; a point without the figure (no usage gauge) makes the
threshold unknown.

When every tested count passes the bound is open (the server may sustain more than was tested).
"""

from __future__ import annotations

from collections.abc import Sequence

from cardgen.analysis.scenarios import closed_pairs
from cardgen.schemas.summary import CapacityThreshold, ScenarioSummary


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
    for (prompt, output), points in closed_pairs(scenarios).items():
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
