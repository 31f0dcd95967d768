"""A robust straight line: the one fit behind prompt ingestion speed, for the card and for the sweep's stop.

Start from the Theil-Sen line (median of pairwise slopes), keep the points whose y is within ``tolerance`` (5 %)
of the line, refit by least squares on them, and repeat until the kept set no longer changes. When fewer than
half the points (or fewer than 3 distinct x) survive the trimming, the Theil-Sen line is kept instead, with the
points within ``tolerance`` of it as the kept ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MAX_THEIL_SEN_POINTS = 1500  # all pairs of at most this many points (about a million slopes)


@dataclass(frozen=True)
class RobustLine:
    slope: float
    intercept: float
    inlier: np.ndarray  # bool per point: kept by the trimming
    method: str  # trimmed_ols | theil_sen


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept): the median of all pairwise slopes, and the median of y - slope x."""
    if len(x) > _MAX_THEIL_SEN_POINTS:
        idx = np.linspace(0, len(x) - 1, _MAX_THEIL_SEN_POINTS).round().astype(int)
        x_s, y_s = x[idx], y[idx]
    else:
        x_s, y_s = x, y
    i, j = np.triu_indices(len(x_s), k=1)
    dx = x_s[j] - x_s[i]
    ok = dx != 0
    slope = float(np.median((y_s[j] - y_s[i])[ok] / dx[ok]))
    return slope, float(np.median(y - slope * x))


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def robust_line(x_values: object, y_values: object, *, tolerance: float = 0.05,
                max_iterations: int = 20) -> RobustLine | None:
    """The fit the module docstring describes; None with fewer than 3 distinct x."""
    x = np.asarray(x_values, dtype=float)
    y = np.asarray(y_values, dtype=float)
    if len(np.unique(x)) < 3:
        return None
    slope, intercept = theil_sen(x, y)
    ts_line = (slope, intercept)
    inlier = np.zeros(len(x), dtype=bool)
    method = "trimmed_ols"
    for _ in range(max_iterations):
        fitted = intercept + slope * x
        new = np.abs(y - fitted) <= tolerance * np.abs(fitted)
        if new.sum() < max(3, len(x) / 2) or len(np.unique(x[new])) < 3:
            method = "theil_sen"
            slope, intercept = ts_line
            fitted = intercept + slope * x
            inlier = np.abs(y - fitted) <= tolerance * np.abs(fitted)
            break
        if np.array_equal(new, inlier):
            break
        inlier = new
        slope, intercept = _ols(x[inlier], y[inlier])
    return RobustLine(slope=slope, intercept=intercept, inlier=inlier, method=method)
