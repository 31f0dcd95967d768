"""Bootstrap replicates of one run's figure, from its own request-level data (pure).

Each run's replicates of a figure are kept as a *digest*: their quantiles at :data:`LEVELS` (every 2.5 %), small
enough to save next to the run (``bootstrap.json``) so that comparing two runs later needs neither run's
requests. A ratio B / A gets its interval from the two digests: :data:`DRAWS` draws from each run's bootstrap
distribution (inverse CDF of its digest, from two fixed seeds, so the two runs are independent), B over A, then
the 2.5th and 97.5th percentiles of those ratios.

**Units.** Requests of one closed-loop point are not independent (parallel users share batches, so neighbours in
time are correlated): its steady requests, in send order, are resampled in whole rounds of ``parallel`` requests
(the oldest round may be partial), as :mod:`cardgen.precision` cuts them into batches. A batch-table point is
resampled by its rounds; an open-loop point and the ingestion sweep (one request at a time) by requests. A figure
with fewer than :data:`MIN_UNITS` units gets no interval.

**Seeds.** Each figure's resamples are drawn from a generator seeded by a checksum of its own values: the same
data always give the same digest, and nothing depends on which run is A.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from cardgen.analysis.stats import BOOTSTRAP_RESAMPLES
from cardgen.precision import MIN_BATCHES
from cardgen.robustline import robust_line

RESAMPLES = BOOTSTRAP_RESAMPLES
LEVEL = 0.95
MIN_UNITS = MIN_BATCHES  # the fewest units that give an interval (the precision rule's fewest batches)
LEVELS = np.linspace(0.0, 1.0, 41)  # the quantiles a digest keeps
DRAWS = 4000  # draws from each run's digest for a ratio's interval
_SEED = 20241121
_CELLS = 2_000_000  # resampled values held at once (memory bound for large points)


def seed_of(*arrays: np.ndarray) -> int:
    """A seed from the bytes of ``arrays``: the same values, the same seed."""
    digest = _SEED
    for arr in arrays:
        digest = zlib.crc32(np.ascontiguousarray(arr, dtype=float).tobytes(), digest)
    return digest


def units(values: Sequence[float] | np.ndarray, labels: Sequence[object] | np.ndarray) -> np.ndarray:
    """``values`` grouped by ``labels`` (one unit per label, in order of first appearance, values in their order)
    as the rows of a 2-D array, padded with NaN to the longest unit."""
    vals = np.asarray(values, dtype=float)
    if vals.size == 0:
        return np.empty((0, 0))
    _, first, inverse = np.unique(np.asarray(labels), return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=int)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    row = rank[inverse.ravel()]
    counts = np.bincount(row)
    by_row = np.argsort(row, kind="stable")
    col = np.empty(vals.size, dtype=int)
    col[by_row] = np.arange(vals.size) - np.repeat(np.cumsum(counts) - counts, counts)
    out = np.full((counts.size, int(counts.max())), np.nan)
    out[row, col] = vals
    return out


def rounds(n: int, parallel: int) -> np.ndarray:
    """Unit labels of ``n`` steady requests in send order at ``parallel`` users: whole rounds ending at the newest
    request, the oldest round partial when ``n`` is not a multiple of ``parallel``."""
    size = max(int(parallel), 1)
    lead = (-n) % size
    return (np.arange(n) + lead) // size


def _draws(k: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, k, size=(resamples, k))


def _row_quantiles(matrix: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Per row, the ``qs`` quantiles of its finite values (linear interpolation, as ``np.percentile``), NaN
    ignored; shape ``(len(qs), rows)``."""
    s = np.sort(matrix, axis=1)  # NaN sorts last
    count = np.isfinite(s).sum(axis=1)
    rows = np.arange(s.shape[0])
    out = np.empty((len(qs), s.shape[0]))
    for j, q in enumerate(qs):
        pos = q * (count - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, count - 1)
        frac = pos - lo
        out[j] = s[rows, lo] + frac * (s[rows, hi] - s[rows, lo])
    return out


def quantile_replicates(values: np.ndarray, labels: np.ndarray, qs: Sequence[float], *,
                        resamples: int = RESAMPLES) -> np.ndarray | None:
    """Replicates of the ``qs`` quantiles of ``values`` over units resampled with replacement (shape
    ``(len(qs), resamples)``); None with fewer than :data:`MIN_UNITS` units."""
    vals = np.asarray(values, dtype=float)
    keep = np.isfinite(vals)
    blocks = units(vals[keep], np.asarray(labels)[keep])
    k = blocks.shape[0]
    if k < MIN_UNITS:
        return None
    draws = _draws(k, resamples, seed_of(blocks))
    step = max(1, _CELLS // blocks.size)
    parts = [_row_quantiles(blocks[draws[i:i + step]].reshape(min(step, resamples - i), -1), qs)
             for i in range(0, resamples, step)]
    return np.concatenate(parts, axis=1)


def ratio_of_sums_replicates(num: np.ndarray, den: np.ndarray, labels: np.ndarray, *,
                             resamples: int = RESAMPLES) -> np.ndarray | None:
    """Replicates of Σ ``num`` / Σ ``den`` over units resampled with replacement; None with fewer than
    :data:`MIN_UNITS` units."""
    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    keep = np.isfinite(n) & np.isfinite(d)
    nb, db = units(n[keep], np.asarray(labels)[keep]), units(d[keep], np.asarray(labels)[keep])
    k = nb.shape[0]
    if k < MIN_UNITS:
        return None
    draws = _draws(k, resamples, seed_of(nb, db))
    per_unit_n, per_unit_d = np.nansum(nb, axis=1), np.nansum(db, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return per_unit_n[draws].sum(axis=1) / per_unit_d[draws].sum(axis=1)


def inverse_slope_replicates(x: np.ndarray, y: np.ndarray, *, resamples: int = RESAMPLES) -> np.ndarray | None:
    """Replicates of 1 / the slope of the ingestion sweep's robust line (:func:`cardgen.robustline.robust_line`,
    refitted, trimming included, on each resample of its points); resamples with fewer than 3
    distinct ``x`` or no positive slope are dropped. None with fewer than :data:`MIN_UNITS` points or when most
    resamples give no positive slope."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size < MIN_UNITS:
        return None
    draws = _draws(xs.size, resamples, seed_of(xs, ys))
    speeds = []
    for idx in draws:
        rx = xs[idx]
        if len(np.unique(rx)) >= 3:
            line = robust_line(rx, ys[idx])
            if line is not None and line.slope > 0:
                speeds.append(1.0 / line.slope)
    return np.asarray(speeds) if len(speeds) >= resamples / 2 else None


def digest(replicates: np.ndarray | None) -> np.ndarray | None:
    """The quantiles at :data:`LEVELS` of the finite replicates (None without any)."""
    if replicates is None:
        return None
    finite = replicates[np.isfinite(replicates)]
    return np.quantile(finite, LEVELS) if finite.size else None


def _grid(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Where :data:`DRAWS` seeded uniform draws fall among :data:`LEVELS` (evenly spaced): the level below each
    and the fraction of the way to the next, so a digest's draws are a gather and a multiply."""
    u = np.random.default_rng(seed).random(DRAWS) * (len(LEVELS) - 1)
    below = np.minimum(u.astype(int), len(LEVELS) - 2)
    return below, u - below


_GRID_A, _GRID_B = _grid(_SEED), _grid(_SEED + 1)


def _drawn(q: np.ndarray, grid: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Draws from the distribution whose quantiles at :data:`LEVELS` are ``q`` (inverse CDF, linear between)."""
    below, frac = grid
    return q[below] + frac * (q[below + 1] - q[below])


def ratio_interval(a: np.ndarray, b: np.ndarray, *, level: float = LEVEL) -> tuple[float, float] | None:
    """Percentile interval of B / A from the two runs' digests (independent draws from each); None when no ratio
    is finite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = _drawn(np.asarray(b, dtype=float), _GRID_B) / _drawn(np.asarray(a, dtype=float), _GRID_A)
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return None
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def finite_or_none(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None
