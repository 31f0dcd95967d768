from __future__ import annotations

import numpy as np
import pytest

from cardgen.analysis.stats import bootstrap_median_ci, bootstrap_medians, describe


def test_describe_matches_numpy_and_ignores_nan():
    x = np.array([5.0, 1.0, np.nan, 3.0, 2.0, 4.0, np.inf])
    d = describe(x)
    assert d.n == 5
    assert d.mean == 3.0 and d.min == 1.0 and d.max == 5.0
    assert d.p50 == 3.0 and d.p25 == 2.0 and d.p75 == 4.0
    assert d.p99 == np.percentile([1, 2, 3, 4, 5], 99)
    assert d.p50_ci_low <= d.p50 <= d.p50_ci_high


def test_describe_of_its_own_array_is_the_same_to_the_bit_and_reorders_it():
    x = np.random.default_rng(1).lognormal(sigma=3, size=100_001)  # a sum whose order shows in its last bits
    kept = x.copy()
    assert describe(x, own=True) == describe(kept)
    assert not np.array_equal(x, kept) and np.array_equal(np.sort(x), np.sort(kept))  # sorted in place, no copy


def test_describe_empty_and_single():
    assert describe([]).n == 0 and describe([]).p50 is None
    one = describe([7.0])
    assert one.p50 == 7.0 and one.p50_ci_low is None


def test_bootstrap_is_deterministic_and_covers_true_median():
    rng = np.random.default_rng(1)
    x = rng.normal(10.0, 1.0, 400)
    a, b = bootstrap_median_ci(x), bootstrap_median_ci(x)
    assert a == b
    lo, hi = a
    assert lo < 10.0 < hi and hi - lo < 0.4


def test_bootstrap_large_sample_stays_cheap():
    x = np.arange(2_000_000, dtype=float)
    lo, hi = bootstrap_median_ci(x)
    assert lo < np.median(x) < hi


def test_exact_bootstrap_matches_brute_force_resampling():
    rng = np.random.default_rng(7)
    for n in (9, 10, 51):
        x = rng.lognormal(0, 1, n)
        brute = np.median(x[rng.integers(0, n, size=(20_000, n))], axis=1)
        fast = bootstrap_medians(x, resamples=20_000)
        for q in (0.025, 0.25, 0.5, 0.75, 0.975):
            assert np.quantile(fast, q) == pytest.approx(np.quantile(brute, q), rel=0.03)
