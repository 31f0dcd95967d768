"""Service-level objectives on percentiles, and whether a load meets them: the rule an SLO search's probes stop
on (:mod:`cardgen.scenarios.slosearch`) and the card shows (:mod:`cardgen.analysis.slosearch`).

**Targets.** A target is a percentile of a per-request latency at most a threshold, written as a suite's
``slo:`` key: ``ttft_p99_s: 2.0`` (TTFT), ``tpot_p99_s: 0.1`` (time per output token), ``e2e_p95_s``,
``itl_p99_9_s`` (the 99.9th percentile of the gaps between text chunks, pooled over the requests). A failed
request counts as an infinite latency: it never meets a target.

**Percentile intervals (order statistics).** Of ``n`` values sorted ``x(1) <= ... <= x(n)``, drawn
independently, the number below the true ``q``-quantile is Binomial(n, q); so ``x(u)`` is an upper confidence
bound of the quantile at level ``L`` for the smallest rank ``u`` with ``P(Bin(n, q) >= u) <= 1 - L``, and
``x(l)`` a lower bound for the largest ``l`` with ``P(Bin(n, q) >= l) >= L``: exact and distribution-free
(Hahn & Meeker, *Statistical Intervals*, ch. 5). Too few values for a bound (the 99th percentile needs 299 for
a 95 % upper bound) give none. The two-sided 95 % interval is the pair of bounds at 97.5 %.

**Dependence.** Requests under one load are not independent draws: a burst delays several neighbours at once.
The bounds are taken from ``n / tau`` draws' worth of the ``n`` values (the rank for that many, as the same
fraction of the ``n``), ``tau`` the integrated autocorrelation time of the values in send order (their ranks, by
batch means over batches of ``sqrt(n)``; 1 with fewer than 8 batches).

**Verdict.** A load meets the SLO when every target's upper bound is within its threshold, and misses it when
some target's lower bound is beyond its threshold; otherwise it cannot tell yet. The values are a probe's
requests in the order they were sent, up to the first that has not ended (a request still running would be
left out only because it is slow), less the warm-up round of a closed loop. They are judged at looks: the first
``min_requests`` of them once they have all ended, then the first twice as many, four times ... and all of them
once the probe's last request has ended. A probe of ``min_requests`` to ``max_requests`` may take ``J`` looks
(every ``min_requests x 2^j`` up to ``max_requests``, and the last); each spends ``0.05 / J`` of the error,
shared equally by the ``k`` targets (Bonferroni: each bound at ``1 - 0.05 / (J k)``), so that a probe judged as
often as it needs is wrong, either way, with at most 5 % probability (nominal, as the dependence correction is).
With 20 to 3,000 requests (9 looks) a p99 target alone is shown met after about 600 independent draws' worth of
requests (299 would do for a single look).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E latency"}
LEVEL = 0.95  # the confidence of a verdict, for the SLO as a whole, over every look
MIN_BATCHES = 8  # batches of sqrt(n) values needed to estimate their correlation time
_KEY = re.compile(r"^(?P<metric>ttft|tpot|itl|e2e)_p(?P<whole>\d{1,2})(?:[._](?P<frac>\d+))?_s$")


@dataclass(frozen=True)
class Target:
    """A percentile of one latency at most ``threshold_s`` seconds."""

    metric: str  # ttft | tpot | itl | e2e
    percentile: float  # 99, 99.9 ...
    threshold_s: float

    @property
    def key(self) -> str:
        """The suite's key: ``ttft_p99_s``, ``itl_p99_9_s``."""
        return f"{self.metric}_p{f'{self.percentile:g}'.replace('.', '_')}_s"

    @property
    def label(self) -> str:
        """``TTFT p99``."""
        return f"{METRICS[self.metric]} p{self.percentile:g}"

    def as_tuple(self) -> tuple[str, float, float]:
        return (self.metric, self.percentile, self.threshold_s)


def parse_target(key: str, value: object) -> Target:
    """One ``slo:`` entry; a ValueError that says what to write instead."""
    match = _KEY.match(str(key))
    if match is None:
        raise ValueError(f"unknown SLO target '{key}': write <ttft|tpot|itl|e2e>_p<percentile>_s, e.g. ttft_p99_s "
                         "or itl_p99_9_s")
    percentile = float(match["whole"] + (f".{match['frac']}" if match["frac"] else ""))
    if not 0 < percentile < 100:
        raise ValueError(f"SLO target '{key}': the percentile must be between 0 and 100")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"SLO target '{key}': the threshold must be a positive number of seconds, not {value!r}")
    return Target(match["metric"], percentile, float(value))


def parse_targets(spec: Mapping[str, object]) -> tuple[Target, ...]:
    """Every target of an ``slo:`` mapping, in its order; at least one."""
    if not spec:
        raise ValueError("give at least one SLO target, e.g. slo: {ttft_p99_s: 2.0, tpot_p99_s: 0.1}")
    return tuple(parse_target(k, v) for k, v in spec.items())


def targets_text(targets: Sequence[Target]) -> str:
    """``TTFT p99 <= 2 s and TPOT p99 <= 100 ms``."""
    def secs(s: float) -> str:
        return f"{s * 1000:g} ms" if s < 1 else f"{s:g} s"
    return " and ".join(f"{t.label} ≤ {secs(t.threshold_s)}" for t in targets)


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


def _at(values: Sequence[float], rank: int | None) -> float | None:
    return None if rank is None else values[rank - 1]


@dataclass(frozen=True)
class PercentileEstimate:
    """One target judged on ``n`` values: the percentile, its two-sided 95 % interval, the one-sided bounds the
    verdict used (at ``level``) and whether the target is met (None: cannot tell)."""

    target: Target
    n: int
    value_s: float | None
    ci_low_s: float | None
    ci_high_s: float | None
    upper_s: float | None
    lower_s: float | None
    level: float
    met: bool | None
    effective_n: float | None = None  # independent draws' worth of them (n / correlation time)


def correlation_time(values: Sequence[float]) -> float:
    """How many consecutive values count as one independent draw (at least 1): the integrated autocorrelation
    time of their ranks (to the microsecond), by batch means (batches of ``sqrt(n)``: ``b * var(batch means) / var(values)``); 1
    with fewer than :data:`MIN_BATCHES` batches."""
    values = [round(v, 6) if math.isfinite(v) else v for v in values]  # to the microsecond: the clocks' resolution
    n = len(values)
    size = max(1, math.isqrt(n))
    k = n // size
    if k < MIN_BATCHES or size < 2:
        return 1.0
    order = sorted(range(n), key=lambda i: values[i])
    ranks = [0.0] * n
    i = 0
    while i < n:  # ties (failed requests are all inf) share their mean rank
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2
        i = j + 1
    tail = ranks[n - k * size:]
    mean = sum(tail) / len(tail)
    var = sum((r - mean) ** 2 for r in tail) / (len(tail) - 1)
    if var == 0:
        return 1.0
    means = [sum(tail[b * size:(b + 1) * size]) / size for b in range(k)]
    var_means = sum((m - mean) ** 2 for m in means) / (k - 1)
    return max(1.0, size * var_means / var)


def _bound(xs: Sequence[float], q: float, level: float, n_eff: float, *, upper: bool) -> float | None:
    """An order-statistic bound of the ``q``-quantile of the sorted ``xs`` at ``level``, from ``n_eff``
    independent draws' worth of them: the rank for ``n_eff`` draws, as the same fraction of the ``n`` values
    (rounded outwards)."""
    n, m = len(xs), max(1, int(n_eff))
    rank = upper_rank(m, q, level) if upper else lower_rank(m, q, level)
    if rank is None:
        return None
    if m == n:
        return xs[rank - 1]
    at = math.ceil(rank / m * n) if upper else math.floor((rank - 1) / m * n) + 1
    return xs[min(n, max(1, at)) - 1]


def estimate(values: Sequence[float], target: Target, *, level: float) -> PercentileEstimate:
    """``target`` judged on ``values``, in the order they were sent (inf for a failed request; NaN left out)."""
    kept = [v for v in values if not math.isnan(v)]
    xs = sorted(kept)
    n, q = len(xs), target.percentile / 100
    if n == 0:
        return PercentileEstimate(target, 0, None, None, None, None, None, level, None)
    n_eff = n / correlation_time(kept)
    value = xs[min(n - 1, max(0, math.ceil(q * n) - 1))]  # the empirical quantile (nearest rank)
    upper, lower = _bound(xs, q, level, n_eff, upper=True), _bound(xs, q, level, n_eff, upper=False)
    met = True if upper is not None and upper <= target.threshold_s else (
        False if lower is not None and lower > target.threshold_s else None)
    two = 1 - (1 - LEVEL) / 2
    return PercentileEstimate(target, n, value, _bound(xs, q, two, n_eff, upper=False),
                              _bound(xs, q, two, n_eff, upper=True), upper, lower, level, met, n_eff)


@dataclass(frozen=True)
class Verdict:
    """Whether a load meets every target (None: cannot tell), with each target's estimate."""

    met: bool | None
    estimates: tuple[PercentileEstimate, ...]
    requests: int  # the requests judged
    look: int = 0  # which look (module docstring)
    late: bool = False  # it would have been met, but a send left after its time: the load was not held


def looks(min_requests: int, max_requests: int) -> int:
    """How many looks a probe of ``min_requests`` to ``max_requests`` requests may take (module docstring)."""
    return 1 + sum(1 for j in range(64) if min_requests * 2**j <= max_requests)


def look_level(targets: int, looks: int) -> float:
    """The level each bound is taken at, for ``targets`` targets and ``looks`` looks."""
    return 1 - (1 - LEVEL) / max(1, looks) / max(1, targets)


def judge(values: Mapping[str, Sequence[float]], targets: Sequence[Target], *, requests: int,
          look: int = 0, looks: int = 1) -> Verdict:
    """The verdict on ``values`` (per metric, in send order: ``ttft``, ``tpot``, ``e2e`` one per request, ``itl``
    one per gap) at look ``look`` of ``looks`` (module docstring)."""
    each = look_level(len(targets), looks)
    estimates = tuple(estimate(values.get(t.metric, ()), t, level=each) for t in targets)
    if any(e.met is False for e in estimates):
        met: bool | None = False
    elif estimates and all(e.met is True for e in estimates):
        met = True
    else:
        met = None
    return Verdict(met, estimates, requests, look)


# --- one request's latencies -----------------------------------------------------------------------------------


def latencies(record: object) -> dict[str, list[float]]:
    """What one request contributes to each metric: its TTFT, TPOT and E2E, and its gaps between text chunks
    (ITL). A failed request contributes inf to each (one gap for ITL); a one-token answer has no TPOT."""
    r = record
    if getattr(r, "error", None) is not None or r.first_token_at is None or r.end_at is None:  # type: ignore[attr-defined]
        return {"ttft": [math.inf], "tpot": [math.inf], "e2e": [math.inf], "itl": [math.inf]}
    ttft = r.first_token_at - r.sent_at  # type: ignore[attr-defined]
    e2e = r.end_at - r.sent_at  # type: ignore[attr-defined]
    out = r.output_tokens or 0  # type: ignore[attr-defined]
    chunks = list(r.chunk_times or ())  # type: ignore[attr-defined]
    return {"ttft": [ttft], "e2e": [e2e], "tpot": [(e2e - ttft) / (out - 1)] if out > 1 else [],
            "itl": [b - a for a, b in zip(chunks, chunks[1:], strict=False)]}


@dataclass
class ProbeJudge:
    """One probe's records, each with its position among the probe's sends (``order``), judged at the looks of
    the module docstring: look ``j`` on exactly the first ``min_requests x 2^j`` judged sends, taken once they
    have all ended, and a last look on every judged send once the probe's last request ended. So the verdict does
    not depend on the order in which records arrive: the analysis, given the same records in any order, reaches
    the probe's own. ``verdict`` is the first decided look, or the last one taken."""

    targets: tuple[Target, ...]
    min_requests: int
    max_requests: int
    ended: dict[int, tuple[dict[str, list[float]], bool, bool]] = field(default_factory=dict)
    prefix: int = 0  # sends 0 .. prefix - 1 have all ended
    judged: list[tuple[dict[str, list[float]], bool]] = field(default_factory=list)  # of those, the judged ones
    looks: int = 0  # looks taken
    verdict: Verdict | None = None

    @property
    def decided(self) -> bool:
        return self.verdict is not None and self.verdict.met is not None

    def add(self, order: int, record: object, *, warmup: bool = False, late: bool = False) -> Verdict | None:
        """Take the record of send ``order`` (``warmup``: not judged; ``late``: it left after its time); the
        verdict once it is decided (None before)."""
        self.ended[order] = ({} if warmup else latencies(record), warmup, late)
        while self.prefix in self.ended:
            values, skipped, was_late = self.ended[self.prefix]
            if not skipped:
                self.judged.append((values, was_late))
            self.prefix += 1
        while not self.decided and len(self.judged) >= self.min_requests * 2**self.looks:
            self._look(self.min_requests * 2**self.looks)
        return self.verdict if self.decided else None

    def finish(self) -> Verdict:
        """Every send has ended: the verdict (a last look on every judged send unless decided before)."""
        if not self.decided and (self.verdict is None or self.verdict.requests < len(self.judged)):
            self._look(len(self.judged))
        assert self.verdict is not None
        return self.verdict

    def _look(self, n: int) -> None:
        values: dict[str, list[float]] = {m: [] for m in METRICS}
        for one, _ in self.judged[:n]:
            for m, vs in one.items():
                values[m] += vs
        verdict = judge(values, self.targets, requests=n, look=self.looks,
                        looks=looks(self.min_requests, self.max_requests))
        self.looks += 1
        if verdict.met is True and any(late for _, late in self.judged[:n]):
            verdict = Verdict(None, verdict.estimates, verdict.requests, verdict.look, late=True)
        self.verdict = verdict
