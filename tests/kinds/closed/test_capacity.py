from __future__ import annotations

from cardgen.kinds.closed.analysis import capacity_thresholds
from cardgen.schemas.summary import Distribution, ScenarioSummary


def point(parallel: int, speed: float | None, kv: float | None, prompt: int = 1024) -> ScenarioSummary:
    return ScenarioSummary(scenario=f"closed-p{parallel}", kind="closed", prompt_tokens=prompt, output_tokens=128,
                           parallel=parallel, requests=10, speed_from_start_tok_s=Distribution(n=10, p50=speed),
                           kv_usage_max=kv)


def test_largest_passing_prefix():
    (c,) = capacity_thresholds([point(10, 25, 0.96), point(1, 70, 0.1), point(4, 40, 0.5), point(16, 19, 0.99),
                                point(32, 21, 1.0)], min_speed_tok_s=20, max_kv_usage=0.95)
    assert c.parallel_tested == [1, 4, 10, 16, 32]
    assert c.max_parallel_at_min_speed == 10 and not c.speed_bound_open  # 32 passes again, but 16 did not
    assert c.max_parallel_below_kv_usage == 4


def test_open_bounds_unknown_and_none_passing():
    pairs = capacity_thresholds([point(1, 70, None), point(4, 40, None), point(1, 5, 0.1, prompt=4096)],
                                min_speed_tok_s=20, max_kv_usage=0.95)
    short, long = pairs
    assert short.max_parallel_at_min_speed == 4 and short.speed_bound_open
    assert short.max_parallel_below_kv_usage is None
    assert long.max_parallel_at_min_speed == 0 and not long.speed_bound_open


def test_a_point_where_everything_failed_is_not_sustained():
    failed = point(16, None, None)
    failed.failed = failed.requests
    (c,) = capacity_thresholds([point(1, 70, 0.1), point(4, 40, 0.3), failed], min_speed_tok_s=20,
                               max_kv_usage=0.95)
    assert c.max_parallel_at_min_speed == 4 and not c.speed_bound_open
    assert c.max_parallel_below_kv_usage is None  # no usage figure at 16: unknown


def test_an_older_summary_keeps_its_thresholds_at_the_top_level_and_reads_them_into_the_kinds_result():
    from cardgen.kinds.closed.analysis import ClosedResult
    from cardgen.schemas.summary import Summary

    old = {"prompt_tokens": 1024, "output_tokens": 128, "parallel_tested": [1, 4], "min_speed_tok_s": 20.0,
           "max_parallel_at_min_speed": 4, "speed_bound_open": True, "max_kv_usage": 0.95}
    s = Summary.model_validate({"model": "m", "capacity": [old]})
    (c,) = ClosedResult.model_validate(s.kinds["closed"]).capacity
    assert (c.prompt_tokens, c.max_parallel_at_min_speed, c.speed_bound_open) == (1024, 4, True)
    assert "capacity" not in s.model_dump()
