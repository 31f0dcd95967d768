"""Comparing two runs figure by figure: B / A, its 95 % interval, whether it is significant and a verdict (pure).

A difference is significant when the ratio's interval excludes 1. The verdict says which way it went for the
reader: ``faster`` / ``slower`` for speeds and latencies (a lower TTFT is faster), ``larger`` / ``smaller`` for
the KV cache capacity; ``no significant change`` when the interval holds 1 (``no change`` for exact figures that
are equal), ``cannot tell`` when a figure has no interval (too few rounds, or a figure with no spread).

A *regression* is a headline that is significantly worse by more than the threshold: its ratio below
1 − threshold (higher is better) or above 1 + threshold (lower is better), with its interval excluding 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cardgen.diff import resample
from cardgen.diff.kindparts import HIGHER
from cardgen.diff.sample import (
    BOOTSTRAP,
    BOUNDS,
    EXACT,
    HEADLINES,
    PART_KEY,
    Figure,
    PointKey,
    RunSample,
    point_label,
    point_sort_value,
)
from cardgen.errors import UsageError

FASTER, SLOWER, LARGER, SMALLER = "faster", "slower", "larger", "smaller"
NO_SIGNIFICANT_CHANGE, NO_CHANGE, CANNOT_TELL = "no significant change", "no change", "cannot tell"
DEFAULT_THRESHOLD = 0.05
HIGHER_SHARE, LOWER_SHARE = "higher", "lower"
# unit -> (better, worse); speeds and latencies: faster, slower. A share (of answers that validated, of draft
# tokens accepted) is higher or lower; a ratio of two figures of one run (constrained / free), lower or higher
_WORDS = {"tokens": (LARGER, SMALLER), "fraction": (HIGHER_SHARE, LOWER_SHARE), "ratio": (LOWER_SHARE, HIGHER_SHARE)}


@dataclass(frozen=True)
class FigureDiff:
    """One figure of both runs: A, B, B / A and its interval, and the verdict."""

    key: str
    name: str
    unit: str
    better: str
    a: float
    b: float
    ratio: float | None  # None when A is 0
    ci_low: float | None
    ci_high: float | None
    interval: str  # bootstrap | exact | bounds | none
    significant: bool | None  # None: no interval
    verdict: str
    note: str = ""
    predicted: str = ""  # which run's figure a calibrated run predicted: "A", "B", "A and B" ("": both measured)

    @property
    def worse(self) -> bool:
        """Significantly worse (whatever the size)."""
        return self.verdict == _WORDS.get(self.unit, (FASTER, SLOWER))[1]

    def beyond(self, threshold: float) -> bool:
        """Worse by more than ``threshold`` (a fraction of A), in the figure's own direction."""
        if self.ratio is None:
            return False
        return self.ratio < 1 - threshold if self.better == HIGHER else self.ratio > 1 + threshold


@dataclass(frozen=True)
class PointDiff:
    key: PointKey
    scenario_a: str
    scenario_b: str
    figures: list[FigureDiff]

    @property
    def label(self) -> str:
        return point_label(self.key)

    @property
    def ttft_cause(self) -> FigureDiff | None:
        """The part of the mean TTFT that changed the most, in seconds (None: no part in both runs)."""
        parts = [f for f in self.figures if f.key.startswith(PART_KEY.format(""))]
        return max(parts, key=lambda f: abs(f.b - f.a), default=None)


@dataclass(frozen=True)
class RunDiff:
    a: RunSample
    b: RunSample
    threshold: float
    headlines: list[FigureDiff]
    points: list[PointDiff]
    only_a: list[str] = field(default_factory=list)  # measured points only A has (scenario names)
    only_b: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[FigureDiff]:
        """Headlines significantly worse by more than the threshold."""
        return [h for h in self.headlines if h.worse and h.beyond(self.threshold)]


def _verdict(figure: Figure, ratio: float | None, low: float | None, high: float | None) -> tuple[bool | None, str]:
    if ratio is None or low is None or high is None:
        return None, CANNOT_TELL
    better_word, worse_word = _WORDS.get(figure.unit, (FASTER, SLOWER))
    if figure.spread.method == EXACT and ratio == 1:
        return False, NO_CHANGE
    significant = low > 1 or high < 1
    if not significant:
        return False, NO_SIGNIFICANT_CHANGE
    return True, better_word if (ratio > 1) == (figure.better == HIGHER) else worse_word


def _range(f: Figure) -> tuple[float, float] | None:
    """Hard bounds of an exact or bracketed figure."""
    if f.spread.method == EXACT:
        return f.value, f.value
    if f.spread.method == BOUNDS and f.spread.low is not None and f.spread.high is not None:
        return f.spread.low, f.spread.high
    return None


def _notes(a: Figure, b: Figure) -> str:
    """Why the figure has no interval (or what its bounds are), once when both runs say the same."""
    if a.spread.note == b.spread.note:
        return a.spread.note
    return "; ".join(f"{side}: {f.spread.note}" for side, f in (("A", a), ("B", b)) if f.spread.note)


def figure_diff(a: Figure, b: Figure) -> FigureDiff:
    """B / A of one figure with its interval: the bootstrap's when both runs resample, the bounds' when both are
    exact or bracketed, none otherwise (the note says why)."""
    ratio = b.value / a.value if a.value else None
    low = high = None
    note = ""
    methods = {a.spread.method, b.spread.method}
    if ratio is None:
        note = "A is 0: no ratio"
    elif methods == {BOOTSTRAP}:
        da, db = a.spread.digest, b.spread.digest  # a bootstrap spread has its digest
        bounds = resample.ratio_interval(da, db) if da is not None and db is not None else None
        if bounds is not None:
            low, high = bounds
    else:
        ra_, rb_ = _range(a), _range(b)
        if ra_ is not None and rb_ is not None and ra_[0] > 0:
            low, high = rb_[0] / ra_[1], rb_[1] / ra_[0]
        note = _notes(a, b)
    significant, verdict = _verdict(a, ratio, low, high)
    interval = "+".join(sorted(methods)) if low is not None else "none"
    predicted = " and ".join(side for side, f in (("A", a), ("B", b)) if f.predicted)
    return FigureDiff(key=a.key, name=a.label, unit=a.unit, better=a.better, a=a.value, b=b.value, ratio=ratio,
                      ci_low=low, ci_high=high, interval=interval, significant=significant, verdict=verdict, note=note,
                      predicted=predicted)


def shared_points(a: RunSample, b: RunSample) -> list[PointKey]:
    """The points both runs measured, in a stable order."""
    return sorted(set(a.points) & set(b.points), key=point_sort_value)


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_comparable(a: RunSample, b: RunSample, *, only_shared: bool = False) -> None:
    """Raise :class:`~cardgen.errors.UsageError` (one line, naming what could be compared) when the runs share no
    figure, or (unless ``only_shared``) ran different suites or different points."""
    shared = shared_points(a, b)
    headlines = [k for k, *_ in HEADLINES if k in a.headlines and k in b.headlines]
    what = (f"{len(headlines)} headline figure{'s' * (len(headlines) != 1)}"
            + (f" ({_names(headlines)})" if headlines else "")
            + f" and {len(shared)} point{'s' * (len(shared) != 1)}"
            + (f" ({_names([a.points[k].scenario for k in shared])})" if shared else ""))
    suite_a, suite_b = a.summary.suite or "?", b.summary.suite or "?"
    if not shared and not headlines:
        raise UsageError(f"nothing to compare: A (suite {suite_a!r}) and B (suite {suite_b!r}) share no measured "
                         "figure")
    if only_shared:
        return
    if suite_a != suite_b:
        raise UsageError(f"the runs are not comparable: A ran suite {suite_a!r}, B suite {suite_b!r}; they share "
                         f"{what}: pass --only-shared to compare those")
    if set(a.suite_points) != set(b.suite_points):
        missing = [name for name in a.suite_points if name not in b.suite_points]
        extra = [name for name in b.suite_points if name not in a.suite_points]
        differ = "; ".join(part for part in (f"only A has {_names(missing)}" if missing else "",
                                             f"only B has {_names(extra)}" if extra else "") if part)
        raise UsageError(f"the runs are not comparable: suite {suite_a!r} with different points ({differ}); they "
                         f"share {what}: pass --only-shared to compare those")


def diff_samples(a: RunSample, b: RunSample, *, threshold: float = DEFAULT_THRESHOLD) -> RunDiff:
    """Every figure both runs have, compared (no comparability check: see :func:`check_comparable`)."""
    headlines = [figure_diff(a.headlines[k], b.headlines[k]) for k, *_ in HEADLINES
                 if k in a.headlines and k in b.headlines]
    points = []
    for key in shared_points(a, b):
        pa, pb = a.points[key], b.points[key]
        figures = [figure_diff(f, pb.figures[name]) for name, f in pa.figures.items() if name in pb.figures]
        points.append(PointDiff(key, pa.scenario, pb.scenario, figures))
    only_a = [a.points[k].scenario for k in sorted(set(a.points) - set(b.points), key=point_sort_value)]
    only_b = [b.points[k].scenario for k in sorted(set(b.points) - set(a.points), key=point_sort_value)]
    return RunDiff(a=a, b=b, threshold=threshold, headlines=headlines, points=points, only_a=only_a, only_b=only_b)
