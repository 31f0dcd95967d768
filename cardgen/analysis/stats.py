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
    """The finite values of ``values`` as a float array: a float array all of whose values are finite is
    itself (read, never changed: no copy of a long run's millions of chunk gaps)."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    keep = np.isfinite(arr)
    return arr if keep.all() else arr[keep]


def bootstrap_medians(values: Iterable[float] | np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = _SEED) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples (n draws with replacement) of the finite ``values``.

    Drawn exactly without materialising the resamples: a resample is the empirical quantile function applied to
    n uniform draws, so its m-th order statistic is ``x_(ceil(n U))`` with ``U`` the m-th order statistic of n
    uniforms, ``Beta(m, n - m + 1)``; the next one is ``U + (1 - U) Beta(1, n - m)``. Same distribution as
    resampling, O(resamples) after sorting.
    """
    return _medians_of_sorted(np.sort(finite(values)), resamples=resamples, seed=seed)


def _medians_of_sorted(x: np.ndarray, *, resamples: int, seed: int) -> np.ndarray:
    """:func:`bootstrap_medians` of the finite values ``x``, sorted."""
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
    return _median_ci_of_sorted(np.sort(finite(values)), level=level, resamples=resamples)


def _median_ci_of_sorted(x: np.ndarray, *, level: float = 0.95,
                         resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
    """:func:`bootstrap_median_ci` of the finite values ``x``, sorted."""
    if len(x) < 2:
        return None
    lo, hi = np.quantile(_medians_of_sorted(x, resamples=resamples, seed=_SEED), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def describe(values: Iterable[float] | np.ndarray, *, ci: bool = True, own: bool = False) -> Distribution:
    """Count, mean, min, max, p25/p50/p75/p90/p95/p99 and (``ci``) a bootstrap 95 % interval on the median.
    ``own``: ``values`` is an array nothing else reads, reordered in place (a long run's pooled chunk gaps: no
    copy of them)."""
    x = finite(values)
    if len(x) == 0:
        return Distribution(n=0)
    mean = float(x.mean())  # before any reordering: the same sum
    # partitioned for the percentiles, then sorted for the interval: the one copy, or none when it is ours
    ordered = x if own else x.copy()
    pct = np.percentile(ordered, PERCENTILES, overwrite_input=True)
    interval = None
    if ci:
        ordered.sort()
        interval = _median_ci_of_sorted(ordered)
    return Distribution(
        n=len(x), mean=mean, min=float(x.min()), max=float(x.max()),
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        p50_ci_low=interval[0] if interval else None, p50_ci_high=interval[1] if interval else None,
    )
