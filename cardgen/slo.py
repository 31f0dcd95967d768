"""Service-level objectives on percentiles, and whether a load meets them: the rule an SLO search's probes stop
on (:mod:`cardgen.kinds.slosearch.program`) and its analysis retells (:mod:`cardgen.kinds.slosearch.analysis`).

**Targets.** A target is a percentile of a per-request latency at most a threshold, written as a suite's
``slo:`` key: ``ttft_p99_s: 2.0`` (TTFT), ``tpot_p99_s: 0.1`` (time per output token), ``e2e_p95_s``,
``itl_p99_9_s`` (the 99.9th percentile of the gaps between text chunks, pooled over the requests). A failed
request counts as an infinite latency: it never meets a target.

**Bounds** (:mod:`cardgen.quantiles`). A target's upper bound is the tail bound once its values are worth
enough independent ones (a p99: 200 draws' worth, and 2,400 requests), the distribution-free order-statistic
bound before; its lower bound is always the order-statistic one, which a percentile far beyond its threshold
reaches within a few dozen requests.

**Verdict.** A load meets the SLO when every target's upper bound is within its threshold, and misses it when
some target's lower bound is beyond its threshold (that first); otherwise it cannot tell yet. Meeting is
claimed only when every target is shown within, so each upper bound may spend the look's whole error (an
intersection-union test: if one target is truly beyond, its own bound alone says so falsely with at most that
probability); missing is claimed when any one target is shown beyond, so the lower bounds share it
(Bonferroni: each at the error / the number of targets).

**Looks.** A probe's values are its requests in the order they were sent, up to the first that has not ended (a
request still running would be left out only because it is slow), less the warm-up round of a closed loop.
A probe of at most ``cap`` requests is judged at looks: the first ``min_requests`` of them once they have all
ended, then the first twice as many, four times ... below ``cap``, and all of them once the probe's last
request has ended. Look ``j`` on ``n_j`` values spends ``0.05 x (n_j - n_(j-1)) / cap`` of the error, the last
look what is left (an error spent in proportion to the requests, as a linear alpha-spending function does), so
that a probe judged as often as it needs is wrong, either way, with at most 5 % probability (nominal, as the
bounds are), while its last looks, where a load near the limit is decided, keep most of it.

**Too close to tell.** Once a target's bounds can be projected (a bound's distance from its centre shrinks as
one over the square root of the values), a probe stops when even its ``cap`` would not decide it, were its
estimates a quarter of a bound's distance further from the threshold than they are: every way to meet needs an upper
bound that would still be beyond a threshold, and every way to miss a lower bound that would still be within.
Its last look is then taken on what it sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cardgen.outcome import Outcome, RequestFigures, chunk_gaps_s
from cardgen.quantiles import order_bound, quantile_correlation_time, tail_estimate, tail_ready

METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E latency"}
LEVEL = 0.95  # the confidence of a verdict, for the SLO as a whole, over every look
ALPHA = 1 - LEVEL
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


# --- one target, one look -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PercentileEstimate:
    """One target judged on ``n`` values: the percentile, its two-sided 95 % interval, the one-sided bounds the
    verdict used (the upper at ``level``, the lower at ``lower_level``) and whether the target is met (None:
    cannot tell). ``tail``: the upper bounds are the tail bound's, around ``centre_s`` (theta); otherwise
    order statistics around the percentile."""

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
    lower_level: float | None = None
    tail: bool = False
    centre_s: float | None = None
    se_s: float | None = None  # the tail bound's standard error

    def may_meet(self, scale: float) -> bool:
        """Whether the upper bound could be within the threshold once its distance from its centre shrinks by
        ``scale``, with the centre a quarter of that distance lower than now (True while there is no bound to
        project)."""
        if self.upper_s is None or self.centre_s is None:
            return True
        if not math.isfinite(self.upper_s):
            return False
        reach = self.upper_s - self.centre_s
        return self.centre_s - reach / 4 + reach * scale <= self.target.threshold_s

    def may_miss(self, scale: float) -> bool:
        """Whether the lower bound could be beyond the threshold once its distance from the percentile shrinks by
        ``scale``, with the percentile a quarter of that distance higher than now (True while there is no bound to
        project)."""
        if self.lower_s is None or self.value_s is None or not math.isfinite(self.value_s):
            return True
        reach = self.value_s - self.lower_s
        return self.value_s + reach / 4 - reach * scale > self.target.threshold_s


def estimate(values: Sequence[float], target: Target, *, level: float,
             lower_level: float | None = None) -> PercentileEstimate:
    """``target`` judged on ``values``, in the order they were sent (inf for a failed request; NaN left out):
    the upper bound at ``level``, the lower at ``lower_level`` (default ``level``)."""
    kept = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    n, q = kept.size, target.percentile / 100
    low_level = level if lower_level is None else lower_level
    if n == 0:
        return PercentileEstimate(target, 0, None, None, None, None, None, level, None, lower_level=low_level)
    xs = np.sort(kept)
    n_eff = n / quantile_correlation_time(kept, q)
    value = float(xs[min(n - 1, max(0, math.ceil(q * n) - 1))])  # the empirical quantile (nearest rank)
    two = 1 - ALPHA / 2
    lower = order_bound(xs, q, low_level, n_eff, upper=False)
    tail = tail_ready(q, n, n_eff)
    se = None
    upper: float | None  # the order statistics' bounds may be None (too few values); the tail fit's are not
    ci_high: float | None
    if tail:
        fit = tail_estimate(kept, q, ordered=xs)
        centre, upper, ci_high, se = fit.theta, fit.upper(level), fit.upper(two), fit.se
    else:
        centre = value
        upper, ci_high = order_bound(xs, q, level, n_eff, upper=True), order_bound(xs, q, two, n_eff, upper=True)
    threshold = target.threshold_s
    met = False if lower is not None and lower > threshold else (
        True if upper is not None and upper <= threshold else None)
    return PercentileEstimate(target, n, value, order_bound(xs, q, two, n_eff, upper=False), ci_high, upper, lower,
                              level, met, n_eff, lower_level=low_level, tail=tail, centre_s=centre, se_s=se)


@dataclass(frozen=True)
class Verdict:
    """Whether a load meets every target (None: cannot tell), with each target's estimate."""

    met: bool | None
    estimates: tuple[PercentileEstimate, ...]
    requests: int  # the requests judged
    look: int = 0  # which look (module docstring)
    late: bool = False  # it would have been met, but a send left after its time: the load was not held
    futile: bool = False  # undecided, and even the probe's cap would not decide it (module docstring)
    alpha: float = ALPHA  # the error this look spent

    @property
    def ratio(self) -> float | None:
        """The binding target's percentile over its threshold (the largest), None before any value."""
        ratios = [e.value_s / e.target.threshold_s for e in self.estimates if e.value_s is not None]
        return max(ratios) if ratios else None


def look_sizes(min_requests: int, cap: int) -> list[int]:
    """The values judged at each of a probe's looks before its last: ``min_requests x 2^j`` below ``cap``."""
    sizes, n = [], max(1, min_requests)
    while n < cap:
        sizes.append(n)
        n *= 2
    return sizes


def look_alpha(before: int, now: int, cap: int) -> float:
    """The error a look on ``now`` values spends, the previous look having been on ``before`` (module docstring)."""
    return ALPHA * max(0, now - before) / max(1, cap)


def judge(values: Mapping[str, Sequence[float]], targets: Sequence[Target], *, requests: int,
          alpha: float = ALPHA, look: int = 0) -> Verdict:
    """The verdict on ``values`` (per metric, in send order: ``ttft``, ``tpot``, ``e2e`` one per request, ``itl``
    one per gap), spending ``alpha`` (module docstring: every upper bound at ``1 - alpha``, every lower at
    ``1 - alpha / targets``)."""
    k = max(1, len(targets))
    estimates = tuple(estimate(values.get(t.metric, ()), t, level=1 - alpha, lower_level=1 - alpha / k)
                      for t in targets)
    if any(e.met is False for e in estimates):
        met: bool | None = False
    elif estimates and all(e.met is True for e in estimates):
        met = True
    else:
        met = None
    return Verdict(met, estimates, requests, look, alpha=alpha)


# --- one request's latencies -----------------------------------------------------------------------------------


def latencies(r: Outcome, metrics: Collection[str] = METRICS) -> dict[str, list[float]]:
    """What one request contributes to each of ``metrics``: its figures (:class:`cardgen.outcome.RequestFigures`,
    the card's), TTFT, TPOT and E2E, and its gaps between text chunks (ITL); a figure it cannot give (a one-token
    answer's TPOT) it leaves out. On top of those figures, the SLO's own rule: a failed request, or one whose
    TTFT or E2E is unknown, missed every target, so it contributes inf to each (one gap for ITL)."""
    figures = RequestFigures.of(r)
    return figure_latencies(figures.ok, figures.ttft_s, figures.e2e_s, figures.tpot_s,
                            figures.chunk_times if "itl" in metrics else (), metrics)


def figure_latencies(ok: bool, ttft_s: float, e2e_s: float, tpot_s: float, chunk_times: Sequence[float],
                     metrics: Collection[str]) -> dict[str, list[float]]:
    """:func:`latencies` from a request's figures as :class:`cardgen.outcome.RequestFigures` gives them (a
    card's request rows hold them: ``ok``, ``ttft_s``, ``e2e_s``, ``tpot_s``; its chunk times, read only for
    ITL)."""
    if not ok or math.isnan(ttft_s) or math.isnan(e2e_s):
        return {m: [math.inf] for m in METRICS if m in metrics}
    out: dict[str, list[float]] = {}
    if "ttft" in metrics:
        out["ttft"] = [ttft_s]
    if "e2e" in metrics:
        out["e2e"] = [e2e_s]
    if "tpot" in metrics:
        out["tpot"] = [] if math.isnan(tpot_s) else [tpot_s]
    if "itl" in metrics:  # a request's every gap: kept only where a target needs them
        out["itl"] = chunk_gaps_s(chunk_times).tolist()
    return out


@dataclass
class ProbeJudge:
    """One probe's records, each with its position among the probe's sends (``order``), judged at the looks of
    the module docstring: look ``j`` on exactly the first ``min_requests x 2^j`` judged sends, taken once they
    have all ended, and a last look on every judged send once the probe's last request ended. So the verdict does
    not depend on the order in which records arrive: the analysis, given the same records in any order (and the
    probe's ``cap``), reaches the probe's own. ``verdict`` is the first decided look, or the last one taken."""

    targets: tuple[Target, ...]
    min_requests: int
    cap: int
    # the sends that ended past ``prefix`` (one taken into ``judged`` is dropped from here)
    ended: dict[int, tuple[dict[str, list[float]], bool, bool]] = field(default_factory=dict)
    prefix: int = 0  # sends 0 .. prefix - 1 have all ended
    judged: list[tuple[dict[str, list[float]], bool]] = field(default_factory=list)  # of those, the judged ones
    looks: int = 0  # looks taken
    spent: float = 0.0  # the error spent by those looks
    verdict: Verdict | None = None
    sizes: list[int] = field(init=False, default_factory=list)  # the looks before the last (look_sizes)

    metrics: frozenset[str] = field(init=False, default=frozenset())  # what the targets judge (all a record keeps)

    def __post_init__(self) -> None:
        self.sizes = look_sizes(self.min_requests, self.cap)
        self.metrics = frozenset(t.metric for t in self.targets)

    @property
    def decided(self) -> bool:
        return self.verdict is not None and self.verdict.met is not None

    @property
    def stopped(self) -> bool:
        """Decided, or too close to tell within the cap: the probe sends no more."""
        return self.verdict is not None and (self.verdict.met is not None or self.verdict.futile)

    def add(self, order: int, record: Outcome, *, warmup: bool = False, late: bool = False) -> Verdict | None:
        """Take the record of send ``order`` (``warmup``: not judged; ``late``: it left after its time); the
        verdict once the probe should stop sending (decided, or too close to tell; None before)."""
        return self.add_latencies(order, {} if warmup else latencies(record, self.metrics), warmup=warmup, late=late)

    def add_latencies(self, order: int, values: dict[str, list[float]], *, warmup: bool = False,
                      late: bool = False) -> Verdict | None:
        """:meth:`add` given what the record contributes to each of the targets' metrics (:func:`latencies`)."""
        self.ended[order] = (values, warmup, late)
        while self.prefix in self.ended:
            values, skipped, was_late = self.ended.pop(self.prefix)
            if not skipped:
                self.judged.append((values, was_late))
            self.prefix += 1
        sizes = self.sizes
        while not self.stopped and self.looks < len(sizes) and len(self.judged) >= sizes[self.looks]:
            before = sizes[self.looks - 1] if self.looks else 0
            self._look(sizes[self.looks], look_alpha(before, sizes[self.looks], self.cap), last=False)
        return self.verdict if self.stopped else None

    def finish(self) -> Verdict:
        """Every send has ended: the verdict (a last look on every judged send, spending what is left, unless
        decided before)."""
        if not self.decided and (self.verdict is None or self.verdict.requests < len(self.judged)):
            self._look(len(self.judged), max(0.0, ALPHA - self.spent), last=True)
        assert self.verdict is not None
        return self.verdict

    def _look(self, n: int, alpha: float, *, last: bool) -> None:
        values: dict[str, list[float]] = {m: [] for m in METRICS}
        for one, _ in self.judged[:n]:
            for m, vs in one.items():
                values[m] += vs
        verdict = judge(values, self.targets, requests=n, alpha=max(alpha, 1e-12), look=self.looks)
        self.looks += 1
        self.spent += alpha
        if verdict.met is True and any(late for _, late in self.judged[:n]):
            verdict = replace(verdict, met=None, late=True)
        if verdict.met is None and not last and n < self.cap:
            scale = math.sqrt(n / self.cap)
            if not all(e.may_meet(scale) for e in verdict.estimates) and not any(
                    e.may_miss(scale) for e in verdict.estimates):
                verdict = replace(verdict, futile=True)
        self.verdict = verdict
