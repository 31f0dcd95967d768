"""How true a calibrated card is: its predicted figures against the same points measured point by point.

The goal (issue 21): every predicted per-point figure within :data:`MEDIAN_GOAL` of the same point measured at
the median, and within :data:`WORST_GOAL` at worst, for the figures of
:data:`cardgen.schemas.calibration.FIGURES`. Points the prediction did not run that the measurement ran (or
the other way round) are counted apart: they are errors of the prediction's shape, not of a figure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from cardgen import numbers
from cardgen.calibrated.figures import errors, figure_values
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


def accuracy(calibrated: Summary, measured: Summary) -> Accuracy:
    """Every point ``calibrated`` predicted against the same point in ``measured`` (a point-by-point run of the
    same suite on the same server)."""
    truth = {s.scenario: s for s in measured.scenarios}
    rows, mismatched = [], []
    for s in calibrated.scenarios:
        if s.basis != PREDICTED or s.scenario not in truth or s.kind in ("waves", "ingest"):
            continue
        t = truth[s.scenario]
        if (s.requests > 0) != (t.requests > 0):
            mismatched.append(f"{s.scenario}: predicted {'run' if s.requests else 'not run'}, measured "
                              f"{'run' if t.requests else 'not run'}")
            continue
        if s.requests:
            rows.append(Row(s.scenario, errors(figure_values(s), figure_values(t))))
    return Accuracy(rows, mismatched)


def format_accuracy(acc: Accuracy, *, title: str) -> str:
    """A plain-text error table: per figure, the points compared, the median and largest error (and where)."""
    lines = [title, f"{'figure':<22} {'points':>6} {'median |error|':>15} {'largest |error|':>16}  where"]
    for name, label, _ in FIGURES:
        median, worst = acc.median(name), acc.worst(name)
        lines.append(f"{label:<22} {len(acc.values(name)):>6} "
                     f"{numbers.pct(median) if median is not None else '-':>15} "
                     f"{numbers.pct(worst[1]) if worst else '-':>16}  {worst[0] if worst else ''}")
    goal = (f"goal (median <= {MEDIAN_GOAL:.0%}, largest <= {WORST_GOAL:.0%} per figure): "
            f"{'met' if acc.met else 'NOT met'}")
    lines.append(goal + (f"; {len(acc.mismatched)} points run on one side only: " + "; ".join(acc.mismatched)
                         if acc.mismatched else ""))
    return "\n".join(lines)
