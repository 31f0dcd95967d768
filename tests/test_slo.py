"""The SLO rule (cardgen.slo): the verdict over several targets and looks, the error spent in proportion to the
requests, a probe's judge, which reaches the same verdict whatever order its records come in, stops when even
its cap would not decide it, and says "met" long before 600 independent draws when the percentile lies far
below its threshold. (The bounds themselves: tests/test_quantiles.py.)"""

from __future__ import annotations

import math
import random

import pytest

from cardgen.outcome import Outcome
from cardgen.slo import (
    ALPHA,
    ProbeJudge,
    Target,
    estimate,
    judge,
    look_alpha,
    look_sizes,
    parse_targets,
)


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


def test_a_failed_request_never_meets_a_target():
    target = Target("ttft", 50, 1.0)
    assert estimate([0.1, math.inf, math.inf, math.inf] * 10, target, level=0.95).met is False
    assert estimate([0.1] * 40, target, level=0.95).met is True


def test_each_look_spends_the_error_in_proportion_to_its_requests():
    assert look_sizes(20, 3000) == [20, 40, 80, 160, 320, 640, 1280, 2560]
    sizes = look_sizes(20, 3000)
    spent = [look_alpha(a, b, 3000) for a, b in zip([0, *sizes], sizes, strict=False)]
    assert spent[0] == pytest.approx(ALPHA * 20 / 3000) and spent[-1] == pytest.approx(ALPHA * 1280 / 3000)
    assert sum(spent) < ALPHA and ALPHA - sum(spent) == pytest.approx(ALPHA * 440 / 3000)  # left for the last look


def test_meeting_needs_every_target_and_missing_any_one():
    fast, slow = Target("ttft", 90, 1.0), Target("tpot", 90, 0.01)
    values = {"ttft": [0.2] * 60, "tpot": [0.005] * 60}
    assert judge(values, [fast, slow], requests=60).met is True
    assert judge({**values, "tpot": [0.02] * 60}, [fast, slow], requests=60).met is False  # one target missed
    assert judge({"ttft": [0.2] * 3, "tpot": [0.005] * 3}, [fast, slow], requests=3).met is None  # too few
    # meeting: every upper bound at the look's whole error; missing: the lower bounds share it
    verdict = judge(values, [fast, slow], requests=60, alpha=0.01)
    assert {e.level for e in verdict.estimates} == {0.99} and {e.lower_level for e in verdict.estimates} == {0.995}


def test_a_p99_far_below_its_threshold_is_met_long_before_600_independent_draws():
    rng = random.Random(5)
    values, x = [], 0.0
    for _ in range(2600):  # correlated draws around 20 ms, a threshold of 50 ms
        x = 0.7 * x + rng.gauss(0, 1)
        values.append(0.020 + 0.002 * x)
    e = estimate(values, Target("tpot", 99, 0.050), level=0.99)
    assert e.tail and e.met is True and e.effective_n < 600 and e.upper_s < 0.035
    assert estimate(values[:1000], Target("tpot", 99, 0.050), level=0.99).met is None  # too few for the tail


def _ended(sent_at: float, first_token_at: float | None, end_at: float | None) -> Outcome:
    """A request that ended, as the probe is told it."""
    return Outcome(ok=True, sent_at=sent_at, first_token_at=first_token_at, end_at=end_at, prompt_tokens=100,
                   output_tokens=10)


def test_a_probe_is_judged_on_its_first_sends_whatever_order_records_end_in():
    rng = random.Random(3)
    records = [_ended(i, i + rng.expovariate(4.0), i + 1.0 + rng.random()) for i in range(300)]
    targets = (Target("ttft", 90, 0.8),)  # TTFT exponential with mean 0.25 s: its p90 is 0.58 s
    verdicts = []
    for seed in range(4):
        order = list(range(300))
        random.Random(seed).shuffle(order)
        probe = ProbeJudge(targets, min_requests=20, cap=300)
        first = None
        for i in order:
            first = first or probe.add(i, records[i])
        verdicts.append((probe.finish(), first is not None))
    assert len({(v.met, v.requests, v.look) for v, _ in verdicts}) == 1
    verdict, decided_early = verdicts[0]
    assert verdict.met is True and decided_early and verdict.requests in (20, 40, 80, 160)


def test_a_probe_with_a_late_send_is_never_met():
    probe = ProbeJudge((Target("ttft", 50, 1.0),), min_requests=5, cap=40)
    for i in range(40):
        probe.add(i, _ended(i, i + 0.1, i + 0.2), late=i == 3)
    verdict = probe.finish()
    assert verdict.met is None and verdict.late


def test_the_warm_up_is_not_judged():
    probe = ProbeJudge((Target("ttft", 50, 1.0),), min_requests=5, cap=40)
    for i in range(4):  # a slow first round
        probe.add(i, _ended(i, i + 5.0, i + 6.0), warmup=True)
    for i in range(4, 40):
        probe.add(i, _ended(i, i + 0.1, i + 0.2))
    assert probe.finish().met is True


def test_a_probe_at_its_threshold_stops_once_even_its_cap_would_not_decide_it():
    rng = random.Random(2)
    probe = ProbeJudge((Target("ttft", 99, 1.0),), min_requests=20, cap=100_000)
    verdict = None
    for i in range(100_000):  # TTFT exponential with its 99th percentile exactly at the threshold
        verdict = probe.add(i, _ended(i, i + rng.expovariate(math.log(100)), i + 2.0))
        if verdict is not None:
            break
    assert verdict is not None and verdict.met is None and verdict.futile and verdict.requests < 50_000


def test_a_probe_judged_again_from_its_rows_gets_what_its_records_gave():
    """The analysis judges a probe again from its request rows' figures (:func:`cardgen.slo.figure_latencies`);
    for records of every shape (failed, no first token, no end, one token, no token count, a decode time of 0)
    each metric gets what :func:`cardgen.slo.latencies` gave the record's outcome during the run."""
    from cardgen.analysis.requests import request_frame
    from cardgen.kinds.slosearch.analysis import _Rows
    from cardgen.kinds.slosearch.schema import SloParams
    from cardgen.schemas.records import RequestRecord
    from cardgen.slo import METRICS, latencies

    def record(i: int, **fields: object) -> RequestRecord:
        base: dict[str, object] = dict(scenario="s", kind="slo", group="g", endpoint="completions",
                                       prompt_tokens_target=8, output_tokens_target=4, index=i, sent_at=100.0 + i,
                                       first_token_at=100.2 + i, chunk_times=[100.2 + i, 100.25 + i, 100.4 + i],
                                       end_at=100.5 + i, output_tokens=3, prompt_tokens=8)
        return RequestRecord(**{**base, **fields})

    records = [record(0), record(1, error="HTTP 500", output_tokens=None), record(2, first_token_at=None),
               record(3, end_at=None), record(4, end_at=None, chunk_times=[]), record(5, output_tokens=1),
               record(6, output_tokens=None), record(7, end_at=100.2 + 7, chunk_times=[100.2 + 7]),
               record(8, chunk_times=[100.2 + 8, 100.1 + 8])]
    frame = request_frame(records)
    rows = _Rows(SloParams(load="rate"), frame)
    for metrics in (frozenset(METRICS), frozenset({"ttft", "tpot"}), frozenset({"itl"})):
        for i in range(len(records)):
            line = int(frame["line"][i])
            assert rows.latencies(i, metrics) == latencies(Outcome.of(records[line]), metrics), (line, metrics)
