"""Prompt ingestion speed: a robust straight line through TTFT against prompt tokens.

Method (the reference card's, made robust): :func:`cardgen.robustline.robust_line` — start from the Theil-Sen
line (median of pairwise slopes), keep the points whose TTFT is within ``tolerance`` (5 %) of the line, refit by
least squares on them, and repeat until the kept set no longer changes. Speed = 1 / slope (tokens per
second); the intercept is fixed overhead (network, scheduling, the first decode step). When fewer than half the
points survive the trimming the Theil-Sen line is kept instead. Two intervals: a bootstrap over the kept points,
and the slope's 95 % t interval over them (:func:`cardgen.precision.slope_interval`; the sweep's precision
target is judged on the same kept points, :func:`cardgen.precision.ingest_interval`), given as a fraction of
the slope and as ingestion speeds 1 / (slope +- half-width).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen.kinds import INGESTION, kinds_giving
from cardgen.precision import slope_interval
from cardgen.robustline import robust_line
from cardgen.schemas.summary import IngestionFit

_SEED = 20241121


@dataclass(frozen=True)
class IngestionResult:
    """The fit and the points behind it (for the figure)."""

    fit: IngestionFit
    prompt_tokens: np.ndarray
    ttft_s: np.ndarray
    inlier: np.ndarray  # bool per point: kept by the trimming


def ingestion_points(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, TTFT s) of the successful, non-warm-up requests of the ingestion sweep. The prompt length
    is the server's count (usage), else the target."""
    rows = requests[requests["kind"].isin(kinds_giving(INGESTION)) & requests["ok"] & ~requests["warmup"]]
    x = rows["prompt_tokens"].fillna(rows["prompt_tokens_target"].astype(float)).to_numpy(dtype=float)
    y = rows["ttft_s"].to_numpy(dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def _bootstrap_slopes(x: np.ndarray, y: np.ndarray, resamples: int = 1000) -> np.ndarray:
    rng = np.random.default_rng(_SEED)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    xs, ys = x[idx], y[idx]
    xm, ym = xs.mean(axis=1, keepdims=True), ys.mean(axis=1, keepdims=True)
    sxx = ((xs - xm) ** 2).sum(axis=1)
    sxy = ((xs - xm) * (ys - ym)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return sxy / sxx


def fit_ingestion(prompt_tokens: np.ndarray, ttft_s: np.ndarray, *, tolerance: float = 0.05,
                  max_iterations: int = 20) -> IngestionResult | None:
    """The robust fit described in the module docstring; None with fewer than 3 distinct prompt lengths."""
    x = np.asarray(prompt_tokens, dtype=float)
    y = np.asarray(ttft_s, dtype=float)
    line = robust_line(x, y, tolerance=tolerance, max_iterations=max_iterations)
    if line is None:
        return None
    slope, intercept, inlier, method = line.slope, line.intercept, line.inlier, line.method
    xi, yi = x[inlier], y[inlier]
    r2 = None
    if len(xi) >= 3:
        resid = yi - (intercept + slope * xi)
        ss_tot = float(((yi - yi.mean()) ** 2).sum())
        r2 = 1 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else None
    lo = hi = None
    if len(xi) >= 3 and slope > 0:
        slopes = _bootstrap_slopes(xi, yi)
        slopes = slopes[np.isfinite(slopes) & (slopes > 0)]
        if len(slopes) >= 100:
            s_lo, s_hi = np.quantile(slopes, [0.025, 0.975])
            lo, hi = 1 / float(s_hi), 1 / float(s_lo)
    half = rel = slow = fast = None
    interval = slope_interval(xi, yi)
    if interval is not None and slope > 0:
        half, rel = interval.half_width, interval.half_width / slope
        fast = 1 / (slope - half) if slope > half else None  # the interval reaches a flat line: no upper speed
        slow = 1 / (slope + half)
    fit = IngestionFit(
        tok_s=1 / slope if slope > 0 else None, tok_s_ci_low=lo, tok_s_ci_high=hi,
        slope_ci_half_width_s_per_token=half, slope_ci_relative=rel, tok_s_slope_ci_low=slow,
        tok_s_slope_ci_high=fast,
        slope_s_per_token=slope, intercept_s=intercept, method=method, tolerance=tolerance,
        n_points=len(x), n_used=int(inlier.sum()), r2=r2,
        prompt_tokens_min=float(x.min()), prompt_tokens_max=float(x.max()),
    )
    return IngestionResult(fit=fit, prompt_tokens=x, ttft_s=y, inlier=inlier)
