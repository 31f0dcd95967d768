"""How true a calibrated card is: its predicted figures against the same points measured point by point.

The goal (issue 21): every predicted per-point figure within :data:`MEDIAN_GOAL` of the same point measured at
the median, and within :data:`WORST_GOAL` at worst, for the figures of
:data:`cardgen.schemas.calibration.FIGURES`. Points the prediction did not run that the measurement ran (or
the other way round) are counted apart: they are errors of the prediction's shape, not of a figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from cardgen import numbers
from cardgen.calibrated.figures import as_values, errors, figure_values
from cardgen.kinds import kind_of
from cardgen.schemas.calibration import FIGURES, PREDICTED, FigureValues
from cardgen.schemas.summary import Summary

MEDIAN_GOAL = 0.05
WORST_GOAL = 0.10


@dataclass(frozen=True)
class Row:
    point: str
    errors: FigureValues  # predicted / measured - 1


@dataclass(frozen=True)
class Accuracy:
    rows: list[Row]
    mismatched: list[str]  # predicted not run but measured, or predicted run but not measured

    def values(self, figure: str) -> list[tuple[str, float]]:
        return [(r.point, abs(v)) for r in self.rows if (v := getattr(r.errors, figure)) is not None]

    def median(self, figure: str) -> float | None:
        v = [e for _, e in self.values(figure)]
        return statistics.median(v) if v else None

    def worst(self, figure: str) -> tuple[str, float] | None:
        v = self.values(figure)
        return max(v, key=lambda x: x[1]) if v else None

    @property
    def met(self) -> bool:
        """Whether every figure meets both goals (and the prediction ran what the measurement ran)."""
        for name, _, _ in FIGURES:
            median, worst = self.median(name), self.worst(name)
            if median is not None and (median > MEDIAN_GOAL or (worst is not None and worst[1] > WORST_GOAL)):
                return False
        return not self.mismatched


def _compare(predicted: Mapping[str, tuple[bool, FigureValues]], measured: Summary) -> Accuracy:
    """Rows of ``{point: (ran, figures)}`` against the same points of ``measured``."""
    truth = {s.scenario: s for s in measured.scenarios}
    rows, mismatched = [], []
    for name, (ran, values) in predicted.items():
        if name not in truth:
            continue
        t = truth[name]
        if ran != (t.requests > 0):
            mismatched.append(f"{name}: predicted {'run' if ran else 'not run'}, measured "
                              f"{'run' if t.requests else 'not run'}")
        elif ran:
            rows.append(Row(name, errors(values, figure_values(t))))
    return Accuracy(rows, mismatched)


def accuracy(calibrated: Summary, measured: Summary) -> Accuracy:
    """Every point ``calibrated`` predicted against the same point in ``measured`` (a point-by-point run of the
    same suite on the same server)."""
    return _compare({s.scenario: (s.requests > 0, figure_values(s)) for s in calibrated.scenarios
                     if s.basis == PREDICTED and kind_of(s).fitted_figures}, measured)


def model_accuracy(predicted: Mapping[str, Mapping[str, float]], measured: Summary) -> Accuracy:
    """The fitted server's prediction of every point (``figures_of_records`` of a calibrated run's
    ``predicted.jsonl``), whether the card kept it or measured the point instead after a spot check missed:
    the model's own error, before the checks protect the card from it."""
    fitted = {s.scenario for s in measured.scenarios if kind_of(s).fitted_figures}
    return _compare({name: (True, as_values(f)) for name, f in predicted.items() if name in fitted}, measured)


def format_accuracy(acc: Accuracy, *, title: str) -> str:
    """A plain-text error table: per figure, the points compared, the median and largest error (and where)."""
    lines = [title, f"{'figure':<22} {'points':>6} {'median |error|':>15} {'largest |error|':>16}  where"]
    for name, label, _ in FIGURES:
        median, worst = acc.median(name), acc.worst(name)
        lines.append(f"{label:<22} {len(acc.values(name)):>6} "
                     f"{numbers.pct(median) if median is not None else '-':>15} "
                     f"{numbers.pct(worst[1]) if worst else '-':>16}  {worst[0] if worst else ''}")
    goal = (f"goal (median <= {MEDIAN_GOAL:.0%}, largest <= {WORST_GOAL:.0%} per figure): "
            f"{('met' if acc.met else 'NOT met') if acc.rows else 'nothing to judge, no point was left predicted'}")
    lines.append(goal + (f"; {len(acc.mismatched)} points run on one side only: " + "; ".join(acc.mismatched)
                         if acc.mismatched else ""))
    return "\n".join(lines)
