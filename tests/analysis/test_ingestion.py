from __future__ import annotations

import numpy as np
import pytest

from cardgen.analysis.ingestion import fit_ingestion
from cardgen.robustline import theil_sen


def points(rate: float = 10_000.0, overhead: float = 0.02, noise: float = 0.01, n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.repeat(np.linspace(16, 4000, n // 3), 3)
    y = (overhead + x / rate) * (1 + rng.normal(0, noise, len(x)))
    return x, y


def test_recovers_rate_and_overhead():
    x, y = points()
    r = fit_ingestion(x, y)
    assert r.fit.method == "trimmed_ols"
    assert r.fit.tok_s == pytest.approx(10_000, rel=0.02)
    assert r.fit.intercept_s == pytest.approx(0.02, abs=0.003)
    assert r.fit.tok_s_ci_low < r.fit.tok_s < r.fit.tok_s_ci_high
    assert r.fit.r2 > 0.99


def test_outliers_are_dropped():
    x, y = points(noise=0.005)
    y = y.copy()
    y[::7] *= 3  # a request stuck behind something else
    r = fit_ingestion(x, y)
    assert r.fit.tok_s == pytest.approx(10_000, rel=0.02)
    assert not r.inlier[::7].any()
    assert r.fit.n_used == r.inlier.sum() < r.fit.n_points


def test_noisy_sweep_falls_back_to_theil_sen():
    x, y = points(noise=0.25, seed=3)
    r = fit_ingestion(x, y)
    assert r.fit.method == "theil_sen"
    assert r.fit.tok_s == pytest.approx(10_000, rel=0.25)


def test_too_few_lengths_gives_none():
    assert fit_ingestion(np.array([100.0, 100.0, 200.0]), np.array([0.1, 0.1, 0.2])) is None


def test_flat_ttft_has_no_speed():
    x = np.linspace(10, 1000, 20)
    r = fit_ingestion(x, np.full(20, 0.05) - x * 1e-9)
    assert r.fit.tok_s is None


def test_theil_sen_exact_line():
    x = np.arange(10.0)
    assert theil_sen(x, 2 * x + 1) == pytest.approx((2.0, 1.0))
