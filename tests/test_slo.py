"""The SLO rule (cardgen.slo): order-statistic bounds of a percentile, the correction for dependence, the
verdict over several targets and looks, and a probe's judge, which reaches the same verdict whatever order its
records come in."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from math import comb

import pytest

from cardgen.slo import (
    ProbeJudge,
    Target,
    correlation_time,
    estimate,
    judge,
    look_level,
    looks,
    lower_rank,
    parse_targets,
    upper_rank,
)


def _tail(n: int, q: float, k: int) -> float:
    return sum(comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k, n + 1))


@pytest.mark.parametrize("n", [1, 5, 20, 100, 298, 299, 450])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_ranks_are_the_exact_binomial_ones(n, q):
    for level in (0.95, 0.975):
        upper = next((u for u in range(1, n + 1) if _tail(n, q, u) <= 1 - level), None)
        lower = max((lo for lo in range(1, n + 1) if _tail(n, q, lo) >= level), default=None)
        assert (upper_rank(n, q, level), lower_rank(n, q, level)) == (upper, lower)


def test_the_99th_percentile_needs_299_values_for_an_upper_bound():
    assert upper_rank(298, 0.99, 0.95) is None and upper_rank(299, 0.99, 0.95) == 299


def test_targets_parse_and_bad_ones_say_what_to_write():
    ttft, itl = parse_targets({"ttft_p99_s": 2.0, "itl_p99_9_s": 0.05})
    assert (ttft.metric, ttft.percentile, ttft.threshold_s, ttft.key) == ("ttft", 99.0, 2.0, "ttft_p99_s")
    assert (itl.percentile, itl.key) == (99.9, "itl_p99_9_s")
    with pytest.raises(ValueError, match="write <ttft|tpot|itl|e2e>_p<percentile>_s"):
        parse_targets({"ttft_p99": 2.0})
    with pytest.raises(ValueError, match="positive number of seconds"):
        parse_targets({"ttft_p99_s": -1})
    with pytest.raises(ValueError, match="at least one"):
        parse_targets({})


def test_correlation_time_is_about_one_for_independent_draws_and_more_for_clustered_ones():
    independent, clustered = [], []
    for seed in range(10):
        rng = random.Random(seed)
        independent.append(correlation_time([rng.random() for _ in range(4000)]))
        x, series = 0.0, []
        for _ in range(4000):  # AR(1) with coefficient 0.8: (1 + 0.8) / (1 - 0.8) = 9, a little less for ranks
            x = 0.8 * x + rng.gauss(0, 1)
            series.append(x)
        clustered.append(correlation_time(series))
    assert max(independent) < 1.4
    assert 6.5 < sum(clustered) / len(clustered) < 10
    assert correlation_time([0.25] * 400) == 1.0  # no spread: nothing to correct


def test_a_failed_request_never_meets_a_target():
    target = Target("ttft", 50, 1.0)
    assert estimate([0.1] * 10 + [math.inf] * 30, target, level=0.95).met is False
    assert estimate([0.1] * 40, target, level=0.95).met is True


def test_the_verdict_spends_its_error_over_targets_and_looks():
    assert looks(20, 3000) == 9  # 20, 40 ... 2,560, and the last
    assert look_level(1, 9) == pytest.approx(1 - 0.05 / 9) and look_level(2, 9) == pytest.approx(1 - 0.05 / 18)
    fast, slow = Target("ttft", 90, 1.0), Target("tpot", 90, 0.01)
    values = {"ttft": [0.2] * 60, "tpot": [0.005] * 60}
    assert judge(values, [fast, slow], requests=60).met is True
    assert judge({**values, "tpot": [0.02] * 60}, [fast, slow], requests=60).met is False  # one target missed
    assert judge({"ttft": [0.2] * 3, "tpot": [0.005] * 3}, [fast, slow], requests=3).met is None  # too few


@dataclass
class _Record:
    sent_at: float
    first_token_at: float | None
    end_at: float | None
    output_tokens: int = 10
    chunk_times: list[float] = field(default_factory=list)
    error: str | None = None


def test_a_probe_is_judged_on_its_first_sends_whatever_order_records_end_in():
    rng = random.Random(3)
    records = [_Record(i, i + rng.expovariate(4.0), i + 1.0 + rng.random()) for i in range(300)]
    targets = (Target("ttft", 90, 0.8),)  # TTFT exponential with mean 0.25 s: its p90 is 0.58 s
    verdicts = []
    for seed in range(4):
        order = list(range(300))
        random.Random(seed).shuffle(order)
        probe = ProbeJudge(targets, min_requests=20, max_requests=300)
        first = None
        for i in order:
            first = first or probe.add(i, records[i])
        verdicts.append((probe.finish(), first is not None))
    assert len({(v.met, v.requests, v.look) for v, _ in verdicts}) == 1
    verdict, decided_early = verdicts[0]
    assert verdict.met is True and decided_early and verdict.requests in (20, 40, 80, 160)


def test_a_probe_with_a_late_send_is_never_met():
    probe = ProbeJudge((Target("ttft", 50, 1.0),), min_requests=5, max_requests=40)
    for i in range(40):
        probe.add(i, _Record(i, i + 0.1, i + 0.2), late=i == 3)
    verdict = probe.finish()
    assert verdict.met is None and verdict.late


def test_the_warm_up_is_not_judged():
    probe = ProbeJudge((Target("ttft", 50, 1.0),), min_requests=5, max_requests=40)
    for i in range(4):  # a slow first round
        probe.add(i, _Record(i, i + 5.0, i + 6.0), warmup=True)
    for i in range(4, 40):
        probe.add(i, _Record(i, i + 0.1, i + 0.2))
    assert probe.finish().met is True
