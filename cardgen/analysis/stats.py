"""Order statistics and bootstrap intervals over plain arrays (NaN and inf are ignored).

Deterministic: the bootstrap draws from a generator seeded with a constant, so the same data give the same
interval on every run.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cardgen.schemas.summary import Distribution

PERCENTILES = (25, 50, 75, 90, 95, 99)
BOOTSTRAP_RESAMPLES = 1000
_SEED = 20241121


def finite(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """The finite values of ``values`` as a float array."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    return arr[np.isfinite(arr)]


def bootstrap_medians(values: Iterable[float] | np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = _SEED) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples (n draws with replacement) of the finite ``values``.

    Drawn exactly without materialising the resamples: a resample is the empirical quantile function applied to
    n uniform draws, so its m-th order statistic is ``x_(ceil(n U))`` with ``U`` the m-th order statistic of n
    uniforms, ``Beta(m, n - m + 1)``; the next one is ``U + (1 - U) Beta(1, n - m)``. Same distribution as
    resampling, O(resamples) after sorting.
    """
    x = np.sort(finite(values))
    n = len(x)
    rng = np.random.default_rng(seed)

    def at(u: np.ndarray) -> np.ndarray:
        return x[np.clip(np.ceil(n * u).astype(int) - 1, 0, n - 1)]

    m = (n + 1) // 2
    u = rng.beta(m, n - m + 1, resamples)
    if n % 2:
        return at(u)
    upper = u + (1 - u) * rng.beta(1, n - m, resamples)
    return (at(u) + at(upper)) / 2


def bootstrap_median_ci(values: Iterable[float] | np.ndarray, *, level: float = 0.95,
                        resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the median: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles
    of :func:`bootstrap_medians`. None with fewer than 2 values."""
    if len(finite(values)) < 2:
        return None
    lo, hi = np.quantile(bootstrap_medians(values, resamples=resamples), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def describe(values: Iterable[float] | np.ndarray, *, ci: bool = True) -> Distribution:
    """Count, mean, min, max, p25/p50/p75/p90/p95/p99 and (``ci``) a bootstrap 95 % interval on the median."""
    x = finite(values)
    if len(x) == 0:
        return Distribution(n=0)
    pct = np.percentile(x, PERCENTILES)
    interval = bootstrap_median_ci(x) if ci else None
    return Distribution(
        n=len(x), mean=float(x.mean()), min=float(x.min()), max=float(x.max()),
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        p50_ci_low=interval[0] if interval else None, p50_ci_high=interval[1] if interval else None,
    )
