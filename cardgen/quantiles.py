"""Confidence bounds of a percentile from latencies measured one after another (pure): the bounds an SLO probe's
verdict rests on (:mod:`cardgen.slo`).

**Order statistics.** Of ``n`` values sorted ``x(1) <= ... <= x(n)``, drawn independently, the number below the
true ``q``-quantile is Binomial(n, q); so ``x(u)`` is an upper confidence bound of the quantile at level ``L`` for
the smallest rank ``u`` with ``P(Bin(n, q) >= u) <= 1 - L``, and ``x(l)`` a lower bound for the largest ``l`` with
``P(Bin(n, q) >= l) >= L``: exact and distribution-free (Hahn & Meeker, *Statistical Intervals*, ch. 5). They use
only ranks, so an upper bound of a high percentile needs many values however far below the threshold they lie:
the 99th percentile needs 299 for a 95 % bound, 459 for 99 %.

**Dependence.** Requests under one load are not independent draws: a burst delays several neighbours at once.
The order-statistic bounds are taken from ``n / tau`` draws' worth of the ``n`` values (the rank for that many, as
the same fraction of the ``n``), ``tau`` the integrated autocorrelation time of the values in send order, by
batch means over batches of ``n^(2/3)`` values (at least :data:`MIN_BATCHES` of them; 1 with fewer): the largest
of their ranks' and of the indicators of exceeding the sample's quantile and the tail bound's anchor
(:func:`quantile_correlation_time`), since bursts cluster a tail more than the bulk. Batches of ``sqrt(n)``
(the textbook size) missed half the correlation of a server's TPOT near its limit and of an M/D/1 queue's
waits at 85 % load: the correlation there outlasts a few dozen requests.

**The tail bound** (for an upper bound, where the distance from the threshold counts). Above its anchor
``p0 = 1 - r (1 - q)`` (``r`` = :data:`TAIL_SPAN`, 10: the 90th percentile for a p99; no lower than the median),
a latency's excess is taken to follow a generalized Pareto distribution of some shape ``xi < 1`` and scale, as
the excesses over a high threshold of any distribution in an extreme-value domain do (Pickands; Balkema & de
Haan). Then the ``q``-quantile is ``Q(p0) + e (1 - xi) (r^xi - 1) / xi``, ``e`` the mean excess over ``Q(p0)``,
and ``(1 - xi) (r^xi - 1) / xi <= c_r``, its largest value over every shape (``c_10`` = 2.34 at ``xi`` = 0.18;
``ln 10`` = 2.30 for an exponential tail; less for a bounded one, such as a TPOT's). So

    theta = Q(p0) + c_r * e >= Q(q)

whatever the shape (for ``xi >= 1`` the mean excess is infinite). ``theta``'s estimate, the anchor's order
statistic plus ``c_r`` times the mean excess of the values above it, is an L-statistic over the top
``r (1 - q)`` of the values, asymptotically normal; its standard error comes from batch means of its influence
values (the quantile's ``(p0 - 1{x <= Q(p0)}) / f(Q(p0))``, the density by the spacing of order statistics
around the anchor, and the tail mean's ``(x - Q(p0))+ / (1 - p0) - e``) over :data:`TAIL_BATCHES` batches of
consecutive values, so the dependence is in it (batch means with a fixed number of batches, each as long as can
be, since a server's latencies near its limit stay correlated over thousands of requests: shorter batches, or
more of them, gave standard errors a third too small). The bound is ``theta + t(11) x SE``.

Its level is asymptotic: it is used once the values above the anchor are worth :data:`TAIL_VALUES` independent
ones (``n / tau x r (1 - q)``; a p99 needs 200 draws' worth of requests) and each batch holds as many values
above the anchor (a p99: 2,400 requests). Fewer, and a window of requests that happened to miss the server's
bursts looks calmer than the server is, its batches too short to show how much the tail varies: an M/D/1 queue
at two thirds of its capacity was "met" on 670 requests at a rate 5 % beyond its limit. Even past that, such a
window shows a thin tail and a small error together: against an M/D/1 queue's TTFT p99 at 5,000 to 10,000
requests the bound at 97.5 % fell below the truth 6 to 8 % of the time (a 99.5 % one 2 to 3 %); what keeps an
SLO search's answer right nonetheless is measured against the oracles (``make bench``). A heavy tail skews the
mean excess the same way: on independent draws of shape 0.3 a 95 % bound fell below the truth 7 % of the time
at 3,000 draws, 6 % at 10,000 (tests/test_quantiles.py). A failed request among the values above the anchor
makes the bound infinite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MIN_BATCHES = 8  # batches of values needed to estimate their correlation time, and the tail bound's error
TAIL_SPAN = 10.0  # the tail bound's anchor has this many times the target's tail share (the p90 for a p99)
TAIL_VALUES = 20.0  # independent values' worth above the anchor the tail bound needs before it is used
TAIL_BATCHES = 12  # the tail bound's error from this many batches (Student's t on 11 degrees of freedom)


# --- order statistics ------------------------------------------------------------------------------------------


def _tail(n: int, q: float) -> tuple[int, list[float]]:
    """``P(Bin(n, q) >= k)`` for the ``k`` that carry any mass (mean +- 12 standard deviations): ``(first k,
    tails)``; ranks below the first have a tail of 1, above the last of 0."""
    mean, sd = n * q, math.sqrt(n * q * (1 - q))
    lo, hi = max(0, int(mean - 12 * sd) - 12), min(n, int(mean + 12 * sd) + 12)
    lq, lr, lf = math.log(q), math.log1p(-q), math.lgamma(n + 1)
    pmf = [math.exp(lf - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lr) for k in range(lo, hi + 1)]
    tails, acc = [0.0] * len(pmf), 0.0
    for i in range(len(pmf) - 1, -1, -1):
        acc += pmf[i]
        tails[i] = min(acc, 1.0)
    return lo, tails


@lru_cache(maxsize=4096)
def upper_rank(n: int, q: float, level: float) -> int | None:
    """The smallest rank ``u`` (1-based) with ``P(Bin(n, q) >= u) <= 1 - level``: ``x(u)`` bounds the
    ``q``-quantile from above at ``level``; None when even ``x(n)`` does not."""
    if n < 1:
        return None
    lo, tails = _tail(n, q)
    for i, tail in enumerate(tails):
        if lo + i >= 1 and tail <= 1 - level:
            return lo + i
    return None  # the window reaches n whenever the tail is still heavy there


@lru_cache(maxsize=4096)
def lower_rank(n: int, q: float, level: float) -> int | None:
    """The largest rank ``l`` (1-based) with ``P(Bin(n, q) >= l) >= level``: ``x(l)`` bounds the ``q``-quantile
    from below at ``level``; None when even ``x(1)`` does not."""
    if n < 1:
        return None
    lo, tails = _tail(n, q)
    best = lo - 1 if lo >= 1 else None  # below the window every tail is 1
    for i, tail in enumerate(tails):
        if lo + i >= 1 and tail >= level:
            best = lo + i
    return best if best is not None and best >= 1 else None


def order_bound(xs: Sequence[float] | np.ndarray, q: float, level: float, n_eff: float, *,
                upper: bool) -> float | None:
    """An order-statistic bound of the ``q``-quantile of the sorted ``xs`` at ``level``, from ``n_eff``
    independent draws' worth of them: the rank for ``n_eff`` draws, as the same fraction of the ``n`` values
    (rounded outwards); None when there are too few."""
    n, m = len(xs), max(1, int(n_eff))
    rank = upper_rank(m, q, level) if upper else lower_rank(m, q, level)
    if rank is None:
        return None
    if m == n:
        return float(xs[rank - 1])
    at = math.ceil(rank / m * n) if upper else math.floor((rank - 1) / m * n) + 1
    return float(xs[min(n, max(1, at)) - 1])


# --- dependence ------------------------------------------------------------------------------------------------


def batch_size(n: int) -> int:
    """Values per batch for ``n`` values: ``n^(2/3)``, but at least :data:`MIN_BATCHES` batches."""
    return max(2, min(int(round(n ** (2 / 3))), n // MIN_BATCHES))


def _mean_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], x.size] - 1
    ranks = np.empty(x.size)
    ranks[order] = np.repeat((starts + ends) / 2, ends - starts + 1)  # ties (failed requests are all inf) share
    return ranks


def correlation_time(values: Sequence[float] | np.ndarray) -> float:
    """How many consecutive values count as one independent draw (at least 1): the integrated autocorrelation
    time of their ranks (to the microsecond), by batch means (``b * var(batch means) / var(values)``, batches of
    :func:`batch_size`); 1 with fewer than :data:`MIN_BATCHES` batches."""
    x = np.asarray(values, dtype=float)
    x = np.where(np.isfinite(x), np.round(x, 6), x)  # to the microsecond: the clocks' resolution
    n = x.size
    size = batch_size(n)
    k = n // size if n else 0
    if k < MIN_BATCHES:
        return 1.0
    tail = _mean_ranks(x)[n - k * size:]
    var = float(tail.var(ddof=1))
    if var == 0:
        return 1.0
    means = tail.reshape(k, size).mean(axis=1)
    return max(1.0, size * float(means.var(ddof=1)) / var)


def _batch_tau(y: np.ndarray) -> float:
    n = y.size
    size = batch_size(n)
    k = n // size if n else 0
    if k < MIN_BATCHES:
        return 1.0
    tail = y[n - k * size:]
    var = float(tail.var(ddof=1))
    if var == 0:
        return 1.0
    return max(1.0, size * float(tail.reshape(k, size).mean(axis=1).var(ddof=1)) / var)


def quantile_correlation_time(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The correlation time that governs a bound of the ``q``-quantile: the largest of the ranks'
    (:func:`correlation_time`) and those of the indicators of exceeding the sample's ``q``-quantile and the tail
    bound's anchor. Bursts cluster a queue's tail more than its bulk: an M/D/1 queue's waits at half its
    capacity have a correlation time of 3 by their ranks, 7 for exceeding their 99th percentile."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2:
        return 1.0
    xs = np.sort(x)
    taus = [correlation_time(x)]
    for level in (q, 1 - tail_ratio(q) * (1 - q)):
        at = xs[min(n - 1, max(0, math.ceil(level * n) - 1))]
        taus.append(_batch_tau((x > at).astype(float)))
    return max(taus)


# --- Student's t -----------------------------------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Lentz; Numerical Recipes 6.4)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
                   -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _beta_regularized(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


@lru_cache(maxsize=4096)
def t_quantile(level: float, df: int) -> float:
    """The ``level`` quantile (``level >= 0.5``) of Student's t with ``df`` degrees of freedom."""
    if df < 1 or not 0.5 <= level < 1:
        raise ValueError("t_quantile takes 0.5 <= level < 1 and at least one degree of freedom")
    tail = 2 * (1 - level)  # P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2), increasing in its argument
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _beta_regularized(df / 2, 0.5, mid) < tail else (lo, mid)
        if hi - lo < 1e-15 * hi:
            break
    x = (lo + hi) / 2
    return math.sqrt(df * (1 - x) / x) if x > 0 else math.inf


# --- the tail bound --------------------------------------------------------------------------------------------


def tail_ratio(q: float) -> float:
    """``r``: the tail share of the tail bound's anchor over the target's (module docstring)."""
    return max(1.0, min(TAIL_SPAN, 0.5 / (1 - q)))


@lru_cache(maxsize=64)
def tail_factor(r: float) -> float:
    """``c_r``: the largest ``(1 - xi) (r^xi - 1) / xi`` over every shape ``xi < 1`` (``ln r`` at 0)."""
    if r <= 1:
        return 0.0

    def g(xi: float) -> float:
        return math.log(r) if abs(xi) < 1e-12 else (1 - xi) * math.expm1(xi * math.log(r)) / xi

    grid = [-60 + i * (60.999 / 60000) for i in range(60001)]
    best = max(grid, key=g)
    lo, hi = best - 0.002, min(best + 0.002, 0.9999)
    for _ in range(100):  # golden section around the grid's best
        a, b = hi - (hi - lo) / 1.618033988749895, lo + (hi - lo) / 1.618033988749895
        lo, hi = (lo, b) if g(a) > g(b) else (a, hi)
    return max(g(best), g((lo + hi) / 2))


def tail_ready(q: float, n: int, n_eff: float) -> bool:
    """Whether ``n`` values, ``n_eff`` independent draws' worth, are enough for the tail bound of the
    ``q``-quantile: :data:`TAIL_VALUES` independent values' worth above the anchor, and as many values above it in
    each of the :data:`TAIL_BATCHES` batches its error comes from."""
    above = tail_ratio(q) * (1 - q)
    return n_eff * above >= TAIL_VALUES and n * above >= TAIL_VALUES * TAIL_BATCHES


@dataclass(frozen=True)
class TailEstimate:
    """``theta`` (module docstring) for one quantile of some values, the anchor it stands on, its standard error
    and the degrees of freedom of that error's batches."""

    theta: float
    anchor: float
    se: float
    df: int

    def upper(self, level: float) -> float:
        """The upper confidence bound of ``theta`` (so of the quantile) at ``level``: ``theta + t x SE``."""
        if not math.isfinite(self.theta) or self.df < 1:
            return math.inf
        return self.theta + t_quantile(level, self.df) * self.se


def tail_estimate(values: Sequence[float] | np.ndarray, q: float, *,
                  ordered: np.ndarray | None = None) -> TailEstimate:
    """``theta >= Q(q)`` for ``values`` (in send order; ``ordered``: the same sorted, when at hand) whatever the
    shape of the tail above the anchor (module docstring), with its standard error; infinite when a failed request
    lies above the anchor."""
    x = np.asarray(values, dtype=float)
    n = x.size
    r = tail_ratio(q)
    k = max(1, min(n - 1, int(round(n * r * (1 - q)))))
    xs = np.sort(x) if ordered is None else ordered
    u, top = float(xs[n - k - 1]), xs[n - k:]
    if not math.isfinite(top[-1]):
        return TailEstimate(math.inf, math.inf, math.inf, 0)
    p0, c = 1 - k / n, tail_factor(r)
    excess = float(top.mean()) - u
    theta = u + c * excess
    h = min(max(n ** -0.5, 0.2 * (1 - p0)), p0 / 2, (1 - p0) / 2)
    below, above = max(0, math.floor(n * (p0 - h))), min(n - 1, math.ceil(n * (p0 + h)))
    per_density = (float(xs[above]) - float(xs[below])) / ((above - below) / n) if above > below else 0.0
    influence = ((1 - c) * (p0 - (x <= u)) * per_density
                 + c * (np.maximum(x - u, 0.0) / (1 - p0) - excess))
    b, size = TAIL_BATCHES, n // TAIL_BATCHES
    if size < 1:
        return TailEstimate(theta, u, math.inf, 0)
    means = influence[n - b * size:].reshape(b, size).mean(axis=1)
    return TailEstimate(theta, u, float(means.std(ddof=1)) / math.sqrt(b), b - 1)

