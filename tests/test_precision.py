import math

import numpy as np
import pytest

from cardgen.precision import (
    batch_size,
    mean_interval,
    median_interval,
    precision_reached,
    running_steady_mask,
    slope_interval,
    steady_mask,
    t975,
)


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706)
    assert t975(9) == pytest.approx(2.262)
    assert t975(1000) == 1.96
    with pytest.raises(ValueError):
        t975(0)


def test_batches_are_whole_rounds_and_at_most_twenty():
    assert batch_size(20, 1) == 1
    assert batch_size(60, 1) == 3
    assert batch_size(100, 1) == 5
    assert batch_size(100, 10) == 10
    assert batch_size(1000, 10) == 50
    assert 1000 // batch_size(1000, 3) <= 20


def test_a_steady_figure_is_precise_and_a_noisy_one_is_not():
    rng = np.random.default_rng(0)
    steady = 50 + rng.normal(0, 0.5, 200)
    noisy = 50 * rng.lognormal(0, 0.6, 200)
    good = median_interval(steady, parallel=4)
    bad = median_interval(noisy, parallel=4)
    assert good is not None and good.relative < 0.01
    assert bad is not None and bad.relative > 0.03
    assert precision_reached([steady, steady], target=0.03, parallel=4)
    assert not precision_reached([steady, noisy], target=0.03, parallel=4)


def test_too_few_batches_give_no_interval():
    assert median_interval([1.0] * 4, parallel=1) is None  # 4 batches of 1
    assert median_interval([1.0] * 5, parallel=1) is not None
    assert median_interval([1.0] * 39, parallel=8) is None  # 4 whole rounds
    assert median_interval([1.0] * 40, parallel=8) is not None
    assert not precision_reached([[1.0] * 4], target=0.5, parallel=1)


def test_the_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    covered = 0
    trials = 400
    for _ in range(trials):
        # correlated within rounds: each round of 8 shares a batch-level shift
        shifts = np.repeat(rng.normal(0, 1.0, 20), 8)
        values = 100 + shifts + rng.normal(0, 1.0, 160)
        iv = median_interval(values, parallel=8)
        covered += iv.low <= 100 <= iv.high
    assert 0.90 <= covered / trials <= 0.99


def test_steady_state_drops_the_ramp_and_the_drain():
    # 2 users: requests 0,1 start together (ramp); completions 1-4 resent, the 5th (request 4, at 3.0) did not:
    # the point stopped there, so request 5, still in flight then, is the drain
    sent = [0.0, 0.0, 1.0, 1.1, 2.0, 2.1]
    ended = [1.0, 1.1, 2.0, 2.1, 3.0, 3.1]
    assert steady_mask(sent, ended, parallel=2).tolist() == [False, False, True, True, True, False]
    # one user: only the first request is the ramp; the last one ended as the point stopped
    assert steady_mask([0, 1, 2, 3], [1, 2, 3, 4], parallel=1).tolist() == [False, True, True, True]
    # 3 users in lockstep: the stop came at 2.0 (the 4th completion); the round sent at 2.0 is all drain, though
    # its requests end together at 3.0, after the last send
    lock_sent, lock_ended = [0, 0, 0, 1, 1, 1, 2, 2], [1, 1, 1, 2, 2, 2, 3, 3]
    assert steady_mask(lock_sent, lock_ended, parallel=3).tolist() == [False] * 3 + [True] * 3 + [False] * 2
    assert running_steady_mask(sent, ended).tolist() == [False, False, True, True, True, True]
    assert steady_mask([], [], parallel=4).size == 0
    assert not steady_mask([0, 0], [1, 1], parallel=2).any()


def test_mean_and_slope_intervals():
    iv = mean_interval([10.0, 10.2, 9.8, 10.1])
    assert iv.median == pytest.approx(10.025) and 0 < iv.relative < 0.03
    assert mean_interval([1.0]) is None
    x = np.arange(16, 4000, 200)
    rng = np.random.default_rng(2)
    y = 0.01 + x / 10000 + rng.normal(0, 1e-4, x.size)
    s = slope_interval(x, y)
    assert s.median == pytest.approx(1e-4, rel=0.02) and s.relative < 0.03
    assert slope_interval([1, 1, 1], [1, 2, 3]) is None
    assert math.isinf(median_interval([0.0] * 20).relative)


def test_a_running_point_is_judged_on_whole_rounds_only():
    from types import SimpleNamespace

    from cardgen.precision import closed_figures

    def rec(sent, end, out=10):
        return SimpleNamespace(ok=True, sent_at=sent, first_token_at=sent + 0.1, end_at=end,
                               output_tokens=out, chunk_times=())

    # 2 users: the ramp (sent at 0), two whole steady rounds, and the first request of a third round
    records = [rec(0, 1), rec(0, 1), rec(1, 2), rec(1, 2), rec(2, 3), rec(2, 3), rec(3, 3.5, out=99)]
    speeds, ttfts = closed_figures(records, parallel=2)
    assert speeds == [10.0] * 4 and len(ttfts) == 4  # the newest, lone request of a round under way is left out
    speeds, _ = closed_figures(records, parallel=1)
    assert len(speeds) == 5 and speeds[-1] == 198.0


def test_the_ingestion_sweep_is_judged_on_the_points_the_cards_line_keeps():
    from types import SimpleNamespace

    from cardgen.analysis.ingestion import fit_ingestion
    from cardgen.precision import ingest_interval, within_target

    lengths = [100, 500, 1000, 2000, 3000, 4000] * 3
    ttft = [0.02 + n / 10_000 * (1 + 0.002 * ((i % 3) - 1)) for i, n in enumerate(lengths)]
    ttft[4] *= 3  # one prompt queued behind something else: far off the line
    records = [SimpleNamespace(ok=True, sent_at=0.0, first_token_at=t, end_at=None, output_tokens=None,
                               chunk_times=(), prompt_tokens=n, prompt_tokens_target=n)
               for n, t in zip(lengths, ttft, strict=True)]
    interval = ingest_interval(records)
    fit = fit_ingestion(np.array(lengths, dtype=float), np.array(ttft)).fit
    assert fit.n_used == len(lengths) - 1
    assert interval.median == pytest.approx(fit.slope_s_per_token)
    assert interval.relative == pytest.approx(fit.slope_ci_relative)
    assert within_target(interval, 0.03, positive=True)  # least squares over every point is far wider:
    assert slope_interval(lengths, ttft).relative > 0.1


def test_settling_groups_find_a_transient_and_leave_a_steady_series_alone():
    from cardgen.precision import mser, settling_groups

    rng = np.random.default_rng(5)
    steady = 0.112 + rng.normal(size=14) * 0.001
    assert settling_groups(np.r_[[0.219, 0.222, 0.218, 0.213], steady]) == 4  # four groups still settling
    assert settling_groups(np.r_[0.166, steady]) == 1
    assert mser(np.r_[3.0, np.zeros(9)]) == 1
    # on steady series MSER alone cuts about 40 % of the time; the test keeps few of those cuts
    cuts = [settling_groups(10 + rng.normal(size=12)) for _ in range(2000)]
    assert np.mean(np.array(cuts) > 0) < 0.06
    assert settling_groups([5.0, 5.0, 5.0, 5.0, 5.0]) == 0  # identical groups: nothing to settle
    assert settling_groups([5.2, 5.0, 5.0, 5.0, 5.0, 5.0]) == 0  # within 5 %: settled however steady
    assert settling_groups([5.3, 5.0, 5.0, 5.0, 5.0, 5.0]) == 1


def test_a_closed_point_leaves_out_the_rounds_still_settling():
    from types import SimpleNamespace

    from cardgen.precision import closed_figures, warmup_requests

    # 5 users in step; after the ramp, 3 rounds with a slow first token, then 8 settled rounds
    records, t = [], 0.0
    for k in range(12):
        ttft = 0.2 if 1 <= k <= 3 else 0.1 + 0.0005 * (k % 3)
        records += [SimpleNamespace(ok=True, sent_at=t, first_token_at=t + ttft, end_at=t + 2.0,
                                    output_tokens=100, chunk_times=()) for _ in range(5)]
        t += 2.0
    speeds, ttfts = closed_figures(records, parallel=5, running=False)
    assert max(ttfts) < 0.15 and len(ttfts) == 5 * 8  # the ramp round and the 3 settling rounds left out
    assert warmup_requests([[0.2] * 15 + [0.1] * 40], parallel=5) == 15
    assert warmup_requests([[0.2] * 5 + [0.1] * 15], parallel=5) == 0  # fewer than 5 groups: not judged
