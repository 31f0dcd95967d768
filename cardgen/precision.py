"""When a point's figure is known: steady state and precision, the rules that let a point stop early.

Pure functions over the requests of one point; the load runner (real time), the virtual-time driver and the
analysis all call these, so a point stops on the same evidence the card later shows.

**Steady state (closed loop).** All users of a closed-loop point start at once, so the first round contends
for prefill together, and when the point stops, the requests still in flight finish with fewer and fewer
neighbours. Steady state is the requests sent at or after the point's first completion and ended by the
moment it stopped (its first completion on which the user did not send again: of ``n`` requests at ``parallel``
users, the ``n - parallel + 1``-th completion); the rest are the ramp and the drain, left out of the point's
figures and counted. The evidence a point stopped on
is so the evidence its card shows.

**Settling.** Users that start together may take more than a round to settle into their steady pattern
(with chunked prefill, their prefills spread over several steps and their rounds drift apart). Of the steady
requests in send order, the oldest still settling are left out too: cut into consecutive groups of whole rounds
(at least 5 requests a group), MSER (White, 1997) proposes how many leading groups to drop (the cut that
minimises the squared deviations of the rest over the square of its count, at most half the groups), and they
are dropped only when their mean differs from the rest's beyond chance (outside the rest's mean +- t(0.995)
s sqrt(1/d + 1/m), and by more than 5 %); for speed from start and TTFT alike (the larger cut wins); counted
with the ramp.

**Precision (batch means over whole rounds).** Requests of one point are not independent: parallel users
share batches, so neighbours in time are correlated. The steady requests, in the order they were sent, are cut
into ``k`` consecutive batches of whole rounds (a round is ``parallel`` requests; at most 20 batches, at least
5; at parallel 1 requests share nothing, so each is its own batch). The median of each batch is one observation; the 95 % interval half-width of the point's median is
``t(0.975, k-1) * s / sqrt(k)``, ``s`` the standard deviation of the ``k`` batch medians. A point with a target
stops when that half-width, divided by the median of all its steady requests, is within the target for every
figure that decides (speed from start and TTFT).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cardgen.outcome import Outcome, RequestFigures
from cardgen.robustline import robust_line

MIN_BATCHES = 5
MAX_BATCHES = 20
SETTLING_GROUP = 5  # requests a group holds at least (whole rounds) when judging which are still settling
SETTLED_FRACTION = 0.05  # groups this close to the later ones are settled: a smaller drift is within what intervals report

# two-sided 95 % quantiles of Student's t, by degrees of freedom (1..30); the normal 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


# two-sided 99 % quantiles of Student's t, by degrees of freedom (1..30); the normal 2.576 beyond
_T995 = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977,
         2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763,
         2.756, 2.750)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("degrees of freedom must be at least 1")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class MedianInterval:
    """The median of a point's figure and its batch-means 95 % interval."""

    median: float
    half_width: float
    batches: int

    @property
    def relative(self) -> float:
        """Half-width as a fraction of the median (inf when the median is 0)."""
        return self.half_width / abs(self.median) if self.median else math.inf

    @property
    def low(self) -> float:
        return self.median - self.half_width

    @property
    def high(self) -> float:
        return self.median + self.half_width


def batch_size(n: int, parallel: int) -> int:
    """Requests per batch for ``n`` steady requests at ``parallel`` users: whole rounds, as few as leave at
    most :data:`MAX_BATCHES` batches."""
    round_size = max(parallel, 1)
    rounds = max(1, math.ceil(n / round_size / MAX_BATCHES))
    return rounds * round_size


def median_interval(values: Sequence[float], *, parallel: int = 1) -> MedianInterval | None:
    """Batch-means interval of the median of ``values`` (in send order); None with fewer than
    :data:`MIN_BATCHES` whole batches."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    size = batch_size(len(data), parallel)
    k = len(data) // size
    if k < MIN_BATCHES:
        return None
    # the batches end at the newest request: a partial batch is the oldest requests, closest to the ramp
    tail = data[len(data) - k * size:]
    medians = np.median(tail.reshape(k, size), axis=1)
    half = t975(k - 1) * float(np.std(medians, ddof=1)) / math.sqrt(k)
    return MedianInterval(median=float(np.median(data)), half_width=half, batches=k)


def steady_mask(sent_at: Sequence[float] | np.ndarray, ended_at: Sequence[float] | np.ndarray, *,
                parallel: int) -> np.ndarray:
    """Which requests of one closed-loop point of ``parallel`` users are steady: sent at or after the point's
    first completion and ended by the moment it stopped (see the module's docstring). Every completion before
    the stop sent the next request, so of ``n`` requests the first ``n - parallel`` completions resent and the
    next one, in order of completion, is the first that did not: the stop."""
    sent = np.asarray(sent_at, dtype=float)
    ended = np.asarray(ended_at, dtype=float)
    users = max(int(parallel), 1)
    if sent.size <= users:
        return np.zeros(sent.size, dtype=bool)
    first_end = np.nanmin(ended)
    stopped = np.sort(ended)[sent.size - users]
    return (sent >= first_end) & (ended <= stopped)


def t995(df: int) -> float:
    """The 0.995 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("degrees of freedom must be at least 1")
    return _T995[df - 1] if df <= len(_T995) else 2.576


def mser(values: Sequence[float] | np.ndarray) -> int:
    """MSER truncation (White, 1997): the number ``d`` of leading values to drop that minimises
    ``sum((x_i - mean)^2) / (n - d)^2`` over the rest, ``d`` at most half of them (the smallest such)."""
    x = np.asarray(values, dtype=float)
    best_d, best = 0, math.inf
    for d in range(x.size // 2 + 1):
        tail = x[d:]
        stat = float(np.sum((tail - tail.mean()) ** 2)) / tail.size**2
        if stat < best * (1 - 1e-9):
            best_d, best = d, stat
    return best_d


def settling_groups(medians: Sequence[float]) -> int:
    """How many of the oldest ``medians`` (of consecutive groups, oldest first) are still settling: the ``d``
    :func:`mser` proposes, kept only when those ``d`` differ from the ``m`` after them beyond chance — their mean
    lies outside the later ones' mean +- t(0.995, m-1) s sqrt(1/d + 1/m) (``s`` the later ones' standard
    deviation) and more than 5 % off it. Otherwise 0."""
    x = np.asarray(medians, dtype=float)
    d = mser(x)
    rest = x[d:]
    if d == 0 or rest.size < 3:
        return 0
    centre = float(rest.mean())
    half = t995(rest.size - 1) * float(rest.std(ddof=1)) * math.sqrt(1 / d + 1 / rest.size)
    return d if abs(float(x[:d].mean()) - centre) > max(half, SETTLED_FRACTION * abs(centre)) else 0


def warmup_requests(series: Sequence[Sequence[float]], *, parallel: int) -> int:
    """How many of a closed-loop point's oldest steady requests (in send order) are still settling after the
    ramp: cut into consecutive groups of whole rounds (at least :data:`SETTLING_GROUP` requests a group), the
    leading groups :func:`settling_groups` finds in the group medians of any figure of ``series`` (each in send
    order; the larger cut wins). A trailing partial group is never dropped."""
    users = max(int(parallel), 1)
    group = users * math.ceil(SETTLING_GROUP / users)
    cut = 0
    for values in series:
        data = np.asarray(values, dtype=float)
        groups = data.size // group
        if groups < MIN_BATCHES:
            continue
        medians = np.median(data[:groups * group].reshape(groups, group), axis=1)
        cut = max(cut, settling_groups(medians))
    return cut * group


def running_steady_mask(sent_at: Sequence[float] | np.ndarray, ended_at: Sequence[float] | np.ndarray,
                        ) -> np.ndarray:
    """Steady requests while a point still runs (its last send is not known yet): every completed request
    sent at or after the first completion."""
    sent = np.asarray(sent_at, dtype=float)
    ended = np.asarray(ended_at, dtype=float)
    if sent.size == 0:
        return np.zeros(0, dtype=bool)
    return sent >= np.nanmin(ended)


def precision_reached(figures: Sequence[Sequence[float]], *, target: float, parallel: int) -> bool:
    """Whether every figure (each a list of per-request values of the steady requests, in send order) has a
    median interval within ``target`` (a fraction: 0.03 is +-3 %)."""
    for values in figures:
        interval = median_interval(values, parallel=parallel)
        if interval is None or interval.relative > target:
            return False
    return True


def closed_figures(records: Sequence[Outcome], *, parallel: int = 1, running: bool = True,
                   ) -> tuple[list[float], list[float]]:
    """Speed from start and TTFT (:class:`cardgen.outcome.RequestFigures`, the card's: NaN where a request
    cannot give one) of a closed-loop point's steady successful records that have both an end and a first
    token, in send order; ``running``: the point still runs (:func:`running_steady_mask`, cut to whole
    rounds of ``parallel``: the newest requests past the last whole round belong to a round still under way, and a
    batch that straddled two rounds would mix them), else it ended (:func:`steady_mask`, with its ``parallel``
    users). Computed as a judge computes them, from :class:`ClosedColumns`."""
    columns = ClosedColumns()
    for r in records:
        columns.add(r)
    return columns.figures(parallel=parallel, running=running)


class ClosedColumns:
    """The four numbers a closed loop's precision reads of each successful record that has an end and a first
    token (send, end, speed from start, TTFT), in the order they were added, as compact columns (8 bytes a number,
    not an object a request): what a long point's judge keeps."""

    def __init__(self) -> None:
        self.sent, self.ended, self.speeds, self.ttfts = (array("d") for _ in range(4))

    def add(self, record: Outcome) -> None:
        """Keep ``record``'s numbers, if it is successful and has both figures."""
        f = RequestFigures.of(record)
        if f.ok and f.e2e_s > 0 and not math.isnan(f.ttft_s):
            self.sent.append(record.sent_at)
            self.ended.append(f.end_at)
            self.speeds.append(f.speed_from_start_tok_s)
            self.ttfts.append(f.ttft_s)

    def figures(self, *, parallel: int = 1, running: bool = True) -> tuple[list[float], list[float]]:
        """:func:`closed_figures` of the records added."""
        if not self.sent:
            return [], []
        order = np.argsort(np.frombuffer(self.sent, dtype=float), kind="stable")  # send order, ties as added
        sent, ended = (np.frombuffer(c, dtype=float)[order] for c in (self.sent, self.ended))
        mask = running_steady_mask(sent, ended) if running else steady_mask(sent, ended, parallel=parallel)
        kept = order[mask]
        if running:  # judge whole rounds: the newest requests past the last whole round are a round still under way
            kept = kept[:len(kept) - len(kept) % max(int(parallel), 1)]
        speeds = np.frombuffer(self.speeds, dtype=float)[kept].tolist()
        ttfts = np.frombuffer(self.ttfts, dtype=float)[kept].tolist()
        cut = warmup_requests([speeds, ttfts], parallel=parallel)
        return speeds[cut:], ttfts[cut:]


def ingest_interval(records: Sequence[Outcome]) -> MedianInterval | None:
    """An ingestion sweep's slope (TTFT seconds per prompt token) and its 95 % t interval
    (:func:`slope_interval`) over the points the card's robust line keeps
    (:func:`cardgen.robustline.robust_line`), from its successful records: ``prompt_tokens`` as the server
    counted them (the sized target when it did not say) against their TTFT. The card's
    ingestion speed is that line, so the sweep stops on the evidence the card shows."""
    ok = [(r.prompt_tokens, ttft) for r in records if not math.isnan(ttft := RequestFigures.of(r).ttft_s)]
    x = np.asarray([n for n, _ in ok], dtype=float)
    y = np.asarray([ttft for _, ttft in ok], dtype=float)
    line = robust_line(x, y)
    if line is None:
        return None
    return slope_interval(x[line.inlier], y[line.inlier])


def within_target(interval: MedianInterval | None, target: float, *, positive: bool = False) -> bool:
    """Whether ``interval`` is known within ``target`` (a fraction of its centre; ``positive``: and its centre is
    above 0, as a slope must be)."""
    return interval is not None and (not positive or interval.median > 0) and interval.relative <= target


def round_decode_speed(records: Sequence[Outcome]) -> float | None:
    """The mean decode speed (tokens after the first / time after the first token: a request's
    ``decode_tok_s``) of one batch round's successful records; None when none has one."""
    speeds = [speed for r in records if not math.isnan(speed := RequestFigures.of(r).decode_tok_s)]
    return sum(speeds) / len(speeds) if speeds else None


def mean_interval(values: Sequence[float]) -> MedianInterval | None:
    """Mean of independent repeats (the batch table's rounds) with its t interval; None with fewer than 2.
    (``median`` holds the mean: the same shape as a median's interval.)"""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size < 2:
        return None
    half = t975(data.size - 1) * float(np.std(data, ddof=1)) / math.sqrt(data.size)
    return MedianInterval(median=float(np.mean(data)), half_width=half, batches=int(data.size))


def slope_interval(x: Sequence[float], y: Sequence[float]) -> MedianInterval | None:
    """Least-squares slope of ``y`` on ``x`` (the ingestion sweep: seconds per prompt token) with its 95 %
    t interval; None with fewer than 3 points or no spread in ``x``. (``median`` holds the slope.)"""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    ok = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    if xs.size < 3 or np.ptp(xs) == 0:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    residual = ys - (slope * xs + intercept)
    se = math.sqrt(float(np.sum(residual**2)) / (xs.size - 2) / float(np.sum((xs - xs.mean()) ** 2)))
    return MedianInterval(median=float(slope), half_width=t975(xs.size - 2) * se, batches=int(xs.size))
