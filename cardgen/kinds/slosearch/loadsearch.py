"""Which loads an SLO search probes, with how many requests each, and what its probes say together (pure): the
search's rules (:mod:`cardgen.kinds.slosearch.program` runs them, :mod:`cardgen.kinds.slosearch.analysis` retells
them).

**Bracketing.** Double from ``start`` until a probe misses (or the probe at ``highest`` meets), halve while the
first probes miss (down to ``lowest``), then bisect between the highest load shown to meet (``low``) and the
lowest shown to miss (``high``) until they are within the resolution (for parallel counts, one apart). Each of
these probes may send up to :data:`PROBE_REQUESTS` requests (or an eighth of the budget, if more).

**Near the limit.** The closer a load lies to the limit, the more requests its verdict needs (as one over the
square of its percentile's distance from the threshold). The search fits the percentile against load over every
probe (:func:`crossing`: the binding target's percentile over its threshold, made non-decreasing in load, then a
line in log-log through the probes near the threshold, weighted by their evidence), takes where it crosses the
threshold as the limit's estimate, and predicts what a load costs from that line and the standard error per
request of the nearest probe. It bisects the gap between known loads (``low``, the loads that could not tell,
``high``) that holds the estimate while its middle is predicted to be decided within a bracketing probe's cap.
After that it aims, one side of the estimate at a time (the side whose end lies further from it), at

- the load half the resolution from the estimate (two such probes bracket it within the resolution), or, when
  half the budget left is not predicted to decide it with room to spare (:data:`SAFETY`), the closest load that
  is;
- but beyond the loads that could not tell on that side (unless one may now send more than twice what it had
  and is then predicted to be decided), at least halfway (in log load) from the side's end to them, and at least
  a quarter of the resolution inside the bracket.

Such a probe may send half the budget left, or :data:`SAFETY` times what it is predicted to need if less (the
error a probe spends at each look is in proportion to its cap: a cap near its need keeps more for the looks that
decide it), but no less than a bracketing probe. The search stops when the bracket is within the resolution, when no
probe could narrow it with what is left of the budget (``max_requests``, for the whole search), or after
:data:`MAX_UNDECIDED` probes that could not tell.

**Flat.** Where probes that could not tell have their percentile within :data:`FLAT` of its threshold, some at or
below it and some above, over loads more than twice the resolution apart, and the line through them rises by no
more than that over the range, the boundary is flat there (:func:`flat_range`): a small change of the percentile moves the limit a
long way, and the answer says so instead of a bare "could not tell". The search then stops aiming at the limit
and bisects the gaps outside that range, to find where it ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PROBE_REQUESTS = 3000  # a bracketing probe's requests at most (or an eighth of the budget, if more)
MAX_UNDECIDED = 5  # the search stops once this many probes could not tell
MAX_PROBES = 40
FLAT = 0.05  # a percentile within 5 % of its threshold over a wide range of loads: a flat boundary
Z_DECIDE = 2.6  # a load near the limit is decided about this many standard errors from it (t on 11 df, 98.75 %:
# with the error spent in proportion to requests, a probe that needs half its cap spends a quarter of it there)
SAFETY = 2.0  # an aimed probe's load is predicted to be decided within this fraction of its cap: 1 / SAFETY
NEAR = 1.5  # probes within half again of the threshold set the crossing's line
MIN_SLOPE = 0.05  # the log-log slope of the percentile against load assumed at least this (a flat one: far away)


@dataclass(frozen=True)
class Probed:
    """What the search learnt from one probe: its verdict (``met`` None: could not tell), the requests it sent
    and its cap, the binding target's percentile over its threshold (``ratio``), and how wide that target's
    bounds were per request: ``(upper - centre) / threshold x sqrt(n)`` (``spread_met``) and ``(percentile -
    lower) / threshold x sqrt(n)`` (``spread_miss``), to predict what a load near it costs to decide."""

    load: float
    met: bool | None
    requests: int = 0
    cap: int = 0
    ratio: float | None = None
    spread_met: float | None = None
    spread_miss: float | None = None
    weight: float = 1.0  # the binding target's independent draws' worth of values


@dataclass(frozen=True)
class Plan:
    """The next probe: its load and how many requests it may send."""

    load: float
    cap: int


def _log(x: float) -> float:
    return math.log(min(max(x, 1e-9), 1e9))


def monotone_curve(points: Sequence[tuple[float, float, float]]) -> list[tuple[float, float]]:
    """``(load, ratio, weight)`` triples made non-decreasing in load: ``(load, ratio)`` pairs, pool-adjacent-
    violators on log ratio weighted by the evidence (the percentile grows with load, and the probes' noise should
    not say otherwise)."""
    blocks: list[list[float]] = []  # [weighted sum, weight, count]
    pts = sorted(points)
    for _, ratio, weight in pts:
        w = max(weight, 1e-9)
        blocks.append([_log(ratio) * w, w, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w_, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w_
            blocks[-1][2] += c
    fitted: list[float] = []
    for s, w, c in blocks:
        fitted += [s / w] * int(c)
    return [(load, math.exp(y)) for (load, _, _), y in zip(pts, fitted, strict=True)]


def crossing(points: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """Where the percentile crosses its threshold, from ``(load, ratio, weight)`` triples (``weight``: the
    probe's independent draws' worth of values): ``(load, log-log slope there)``, from a straight line of log
    ratio on log load, least squares weighted by the evidence, over the probes whose percentile lies within half
    again of its threshold and the two loads between which the monotone curve crosses it (the last at or below
    the threshold, the first above). None when that curve does not cross within the loads given."""
    pts = [(x, r, w) for x, r, w in points if x > 0]
    curve = monotone_curve(pts)
    below = [(x, r) for x, r in curve if r <= 1]
    above = [(x, r) for x, r in curve if r > 1]
    if not below or not above:
        return None
    (a, ra), (b, rb) = max(below), min(above)
    if b <= a:
        return None
    near = [(x, r, w) for x, r, w in pts if x in (a, b) or 1 / NEAR <= r <= NEAR]
    slope = _slope(near)
    if slope <= 0:  # the noise says nothing: between the two, on the monotone curve
        slope = (_log(rb) - _log(ra)) / (math.log(b) - math.log(a))
        if slope <= 0:
            return None
        return math.exp(math.log(a) - _log(ra) / slope), slope
    total = sum(w for _, _, w in near)
    mx = sum(math.log(x) * w for x, _, w in near) / total
    my = sum(_log(r) * w for _, r, w in near) / total
    return math.exp(mx - my / slope), slope


def _slope(points: Sequence[tuple[float, float, float]]) -> float:
    """The slope of log ratio on log load, least squares weighted by the evidence (0 with fewer than two loads)."""
    pts = [(math.log(x), _log(r), w) for x, r, w in points if x > 0]
    total = sum(w for _, _, w in pts)
    if len({x for x, _, _ in pts}) < 2 or total <= 0:
        return 0.0
    mx, my = sum(x * w for x, _, w in pts) / total, sum(y * w for _, y, w in pts) / total
    sxx = sum(w * (x - mx) ** 2 for x, _, w in pts)
    return sum(w * (x - mx) * (y - my) for x, y, w in pts) / sxx


def flat_range(probes: Sequence[Probed], resolution: float, *, whole: bool) -> tuple[float, float] | None:
    """The loads over which probes that could not tell had their percentile within :data:`FLAT` of its threshold,
    some at or below it and some above, when they lie more than twice the resolution apart (for parallel counts,
    at least two apart) and the line through them rises by no more than :data:`FLAT` over that range; None
    otherwise."""
    near = [(p.load, p.ratio, p.weight) for p in probes if p.met is None and p.ratio is not None
            and abs(p.ratio - 1) <= FLAT]
    if not any(ratio <= 1 for _, ratio, _ in near) or not any(ratio > 1 for _, ratio, _ in near):
        return None
    lo, hi = min(load for load, _, _ in near), max(load for load, _, _ in near)
    wide = hi - lo >= 2 if whole else hi > lo * (1 + resolution) ** 2
    slope = _slope(near)
    return (lo, hi) if wide and slope * math.log(hi / lo) <= FLAT else None


class LoadSearch:
    """The loads to probe and each one's cap (module docstring). ``next_probe()`` gives the next (None when
    done); ``report(probed)`` says how it went."""

    def __init__(self, *, start: float, lowest: float, highest: float, resolution: float, whole: bool,
                 budget: int | None = None, min_requests: int = 1) -> None:
        self.start, self.lowest, self.highest = start, lowest, highest
        self.resolution, self.whole = resolution, whole
        self.budget, self.min_requests = budget, max(1, min_requests)
        self.probes: list[Probed] = []
        self._pending: Plan | None = None

    # --- what is known -------------------------------------------------------------------------------------

    @property
    def loads(self) -> list[float]:
        return [p.load for p in self.probes]

    @property
    def low(self) -> float | None:
        """The highest load shown to meet."""
        return max((p.load for p in self.probes if p.met is True), default=None)

    @property
    def high(self) -> float | None:
        """The lowest load shown to miss."""
        return min((p.load for p in self.probes if p.met is False), default=None)

    @property
    def undecided(self) -> list[float]:
        return [p.load for p in self.probes if p.met is None]

    @property
    def spent(self) -> int:
        return sum(p.requests for p in self.probes)

    @property
    def left(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - self.spent)

    @property
    def bracketed(self) -> bool:
        """Whether the highest load within the SLO is known to within the resolution."""
        return self.low is not None and self.high is not None and not self._wide(self.low, self.high)

    @property
    def untold(self) -> list[float]:
        """The loads that could not be told between ``low`` and ``high`` (or beyond the one that is known)."""
        low, high = self.low, self.high
        return sorted(u for u in self.undecided if (low is None or u > low) and (high is None or u < high))

    @property
    def out_of_budget(self) -> bool:
        """Whether the search stopped for its budget: it would probe again, but what is left of ``max_requests``
        is less than a probe's least."""
        return self._choose() is not None and self._plan() is None

    def crossing(self) -> tuple[float, float] | None:
        """The limit's estimate from every probe's percentile (:func:`crossing`), kept within ``low`` and
        ``high``."""
        found = crossing([(p.load, p.ratio, p.weight) for p in self.probes if p.ratio is not None])
        if found is None:
            return None
        x, slope = found
        if self.low is not None:
            x = max(x, self.low)
        if self.high is not None:
            x = min(x, self.high)
        return x, slope

    def flat(self) -> tuple[float, float] | None:
        return flat_range(self.probes, self.resolution, whole=self.whole)

    # --- what to probe next --------------------------------------------------------------------------------

    def next_probe(self) -> Plan | None:
        if self._pending is not None:
            raise RuntimeError("report the last probe before asking for the next")
        self._pending = self._plan()
        return self._pending

    def report(self, probed: Probed) -> None:
        if self._pending is None or probed.load != self._pending.load:
            raise RuntimeError(f"a probe at {probed.load:g} reported, {self._pending} was asked for")
        self._pending = None
        self.record(probed)

    def record(self, probed: Probed) -> None:
        """A probe's outcome, asked for or not (the analysis retells a search from its records)."""
        self.probes.append(probed)

    def cap_for_next(self) -> int:
        """The cap the next probe gets (the analysis retells each probe with it)."""
        plan = self._plan()
        return plan.cap if plan is not None else self._bracketing_cap()

    def _plan(self) -> Plan | None:
        chosen = self._choose()
        if chosen is None:
            return None
        load, aimed = chosen
        left = self.left
        cap = self._bracketing_cap()
        if left is not None and aimed:  # half what is left, or twice what it is predicted to need, if less
            cost = self._cost(load)
            share = left // 2 if cost is None or not math.isfinite(cost) else min(left // 2, int(SAFETY * cost))
            cap = max(cap, share)
        if left is not None:
            cap = min(left, cap)
        return Plan(float(load), cap) if cap >= self.min_requests else None

    def _bracketing_cap(self) -> int:
        return PROBE_REQUESTS if self.budget is None else max(PROBE_REQUESTS, self.budget // 8)

    def _choose(self) -> tuple[float, bool] | None:
        """The next load, and whether it is aimed near the limit (module docstring)."""
        if not self.probes:
            return self.start, False
        if len(self.undecided) >= MAX_UNDECIDED or len(self.probes) >= MAX_PROBES:
            return None
        low, high = self.low, self.high
        if high is None:  # nothing missed yet: grow past every load tried
            top = max(self.loads)
            return None if top >= self.highest else (min(top * 2, self.highest), False)
        if low is None:  # nothing met yet: shrink below every load tried
            bottom = min(self.loads)
            if bottom <= self.lowest:
                return None
            return max(math.floor(bottom / 2) if self.whole else bottom / 2, self.lowest), False
        if not self._wide(low, high):
            return None
        mid = self._bisect()
        if mid is not None:
            return mid, False
        sides = self._open_sides()
        if sides:
            return max(sides)[1], True
        mid = (low + high) // 2 if self.whole else (low + high) / 2
        return (mid, True) if self.whole and self._fresh(mid) else None  # the last count left between them

    def _bisect(self) -> float | None:
        """The middle of the gap between known loads (``low``, the untold ones, ``high``) that holds the limit's
        estimate (the widest gap while there is none), when it is wider than the resolution and a probe there is
        predicted to be decided within a bracketing probe's cap (or the probes cannot say yet)."""
        low, high = self.low, self.high
        assert low is not None and high is not None
        known = sorted({low, high, *self.untold})
        gaps = [(a, b) for a, b in zip(known, known[1:], strict=False) if self._wide(a, b)]
        if not gaps:
            return None
        est = self.crossing()
        holding = [g for g in gaps if est is not None and g[0] <= est[0] <= g[1]]
        a, b = holding[0] if holding else max(gaps, key=lambda g: g[1] / g[0])
        mid = (a + b) // 2 if self.whole else (a + b) / 2
        if not self._fresh(mid):
            return None
        cost = self._cost(mid)
        return mid if cost is None or cost <= self._bracketing_cap() else None

    def _open_sides(self) -> list[tuple[float, float]]:
        """``(how far that side's end lies from the estimate, in log load, the load to probe there)`` for each side
        of the limit's estimate a probe could still narrow."""
        low, high = self.low, self.high
        if low is None or high is None or not self._wide(low, high):
            return []
        flat = self.flat()
        if flat is not None:  # map the flat range's edges: the middle of each gap outside it
            out = []
            if self._wide(low, flat[0]):
                x = math.floor(math.sqrt(low * flat[0])) if self.whole else math.sqrt(low * flat[0])
                if low < x < flat[0] and self._fresh(x):
                    out.append((math.log(flat[0] / low), x))
            if self._wide(flat[1], high):
                x = math.ceil(math.sqrt(flat[1] * high)) if self.whole else math.sqrt(flat[1] * high)
                if flat[1] < x < high and self._fresh(x):
                    out.append((math.log(high / flat[1]), x))
            return out
        est = self.crossing()
        centre, slope = est if est is not None else (math.sqrt(low * high), 1.0)
        slope = max(slope, MIN_SLOPE)
        left = self.left
        share = None if left is None else left / 2
        half = math.sqrt(1 + self.resolution)
        # a load that could not tell holds a side back unless it may now spend twice what it had and is then
        # predicted to be decided
        untold = [p.load for p in self.probes if p.met is None and p.load in self.untold
                  and (share is None or p.cap >= share / 2 or self._too_close(p.load, share))]
        out = []
        step = 1 + self.resolution / 4
        # the low side: as close as the resolution needs, or as the budget affords, but below every untold load
        # there, and at least half the resolution above low
        reach = self._reach(centre, met=True, share=share)
        closest = min([centre / half] + [u / step for u in untold if u <= centre])
        x = closest if reach is None else min(closest, centre * max(0.0, 1 - reach) ** (1 / slope))
        x = max(x, low + 1 if self.whole else low * step, math.sqrt(low * closest))  # at least halfway in
        x = math.floor(x) if self.whole else x
        if low < x <= closest and self._fresh(x):
            out.append((math.log(centre / low), x))
        reach = self._reach(centre, met=False, share=share)
        closest = max([centre * half] + [u * step for u in untold if u >= centre])
        x = closest if reach is None else max(closest, centre * (1 + reach) ** (1 / slope))
        x = min(x, high - 1 if self.whole else high / step, math.sqrt(closest * high))  # at least halfway in
        x = math.ceil(x) if self.whole else x
        if closest <= x < high and self._fresh(x):
            out.append((math.log(high / centre), x))
        return out

    def _too_close(self, x: float, share: float) -> bool:
        """Whether a probe at ``x`` is predicted to need more than its share (unknown: not)."""
        cost = self._cost(x)
        return cost is not None and cost > share / SAFETY

    def _spread(self, x: float, *, met: bool) -> float | None:
        """The standard error per request (relative to the threshold) of the probe nearest ``x`` that has one."""
        known = [(abs(math.log(p.load / x)), s) for p in self.probes
                 if (s := p.spread_met if met else p.spread_miss) is not None and math.isfinite(s)]
        return min(known)[1] if known else None

    def _reach(self, centre: float, *, met: bool, share: float | None) -> float | None:
        """How far from the threshold (relative) a load must be for ``share`` requests to decide it; None when no
        probe says."""
        spread = self._spread(centre, met=met)
        if share is None or share <= 0 or spread is None:
            return None
        return Z_DECIDE * spread / math.sqrt(share / SAFETY)

    def _ratio_at(self, x: float) -> float | None:
        """The binding percentile over its threshold at load ``x``, on the monotone curve (log-log, the end
        segments extended)."""
        curve = [(a, r) for a, r in monotone_curve([(p.load, p.ratio, p.weight) for p in self.probes
                                                     if p.ratio is not None])
                 if a > 0]
        if len(curve) < 2:
            return None
        pts = [(math.log(a), _log(r)) for a, r in curve]
        lx = math.log(x)
        i = max(1, min(len(pts) - 1, next((j for j, (a, _) in enumerate(pts) if a >= lx), len(pts) - 1)))
        (a, ya), (b, yb) = pts[i - 1], pts[i]
        if b <= a:
            return math.exp(ya)
        return math.exp(ya + (yb - ya) * (lx - a) / (b - a))

    def _cost(self, x: float) -> float | None:
        """The requests a probe at ``x`` is predicted to need for a verdict; None when the probes cannot say."""
        ratio = self._ratio_at(x)
        if ratio is None:
            return None
        spread = self._spread(x, met=ratio <= 1)
        if spread is None:
            return None
        margin = abs(ratio - 1)
        return math.inf if margin == 0 else (Z_DECIDE * spread / margin) ** 2

    def _fresh(self, x: float) -> bool:
        """Whether ``x`` is not a load already probed (within an eighth of the resolution)."""
        return all(abs(x - p.load) > (0.5 if self.whole else self.resolution / 8 * p.load) for p in self.probes)

    def _wide(self, a: float, b: float) -> bool:
        return b - a > max(1 if self.whole else 0, self.resolution * a)
