"""Spot checks: predicted points measured to check the prediction, where it is least sure or matters most.

Per prompt / output pair, the largest load the prediction ran (the largest parallel count of its closed-loop
points; a pair with none: its largest batch, else its highest open-loop rate): near saturation the scheduler's
queueing and preemptions take over from the step time, which is where a model fitted on lighter points is least
sure, and it is the point a reader of the card sizes a deployment by. Every pair gets one, so the pairs of the
suite's longest output get theirs: long-output points (decode over a growing KV cache, the longest requests of the
suite) are always checked. Then the predicted point whose interval is widest, when it costs no more than a check
already chosen.

A check passes when each of its figures is within the tolerance of the measured one and the prediction did not
say it saturated the server when it did not (the larger counts would then run on the real server). A pair whose
check misses is measured point by point instead: a calibrated card is never less true than a measured one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cardgen.calibrated.figures import errors, worst
from cardgen.calibrated.predict import Prediction, pair_of
from cardgen.kinds import kind_of
from cardgen.points import Point
from cardgen.scenarios import skips_after_saturation
from cardgen.schemas.calibration import FigureValues, SpotCheck
from cardgen.stops import STOP_SKIPPED


@dataclass(frozen=True)
class Check:
    point: Point
    pair: str
    why: str


def _load(point: Point) -> float:
    """A point's load, to rank a kind's points by: its arrival rate where it has one, its parallel count else; a
    replayed trace has no load of its own to rank (0)."""
    if point.rate_rps is not None:
        return point.rate_rps
    return 0.0 if point.replay else float(point.parallel or 1)


def _interval_width(prediction: Prediction, name: str) -> float:
    p = prediction.points.get(name)
    if p is None:
        return 0.0
    widths = [math.log(h / lo) for (_, h), (_, lo) in zip(p.high.named(), p.low.named(), strict=True)
              if h is not None and lo is not None and lo > 0]
    return max(widths, default=0.0)


def choose(points: Sequence[Point], prediction: Prediction, measured: Collection[str]) -> list[Check]:
    """The spot checks (see the module docstring), in suite order."""
    ran = [p for p in points if kind_of(p).spot_check is not None and prediction.outcomes.get(p.name) is not None
           and prediction.outcomes[p.name].stop != STOP_SKIPPED]
    predicted = [p for p in ran if p.name not in measured]
    chosen: dict[str, Check] = {}
    for pair in dict.fromkeys(pair_of(p) for p in predicted):
        in_pair = [p for p in predicted if pair_of(p) == pair]
        preferred = min(kind_of(p).spot_check or 0 for p in in_pair)  # the kind checked first (closed, batch, open)
        top = max((p for p in in_pair if kind_of(p).spot_check == preferred), key=_load)
        chosen[top.name] = Check(top, pair or "", f"the largest {kind_of(top).check_load} of {pair} the prediction "
                                 "ran: nearest saturation, where the model is least sure")
    budget = max((prediction.duration_s(c.point.name) for c in chosen.values()), default=0.0)
    rest = [p for p in predicted if p.name not in chosen]
    if rest:
        widest = max(rest, key=lambda p: _interval_width(prediction, p.name))
        if _interval_width(prediction, widest.name) > 0 and prediction.duration_s(widest.name) <= budget:
            chosen[widest.name] = Check(widest, pair_of(widest) or "",
                                        "the predicted point with the widest interval: where the fit is least sure")
    order = {p.name: i for i, p in enumerate(points)}
    return sorted(chosen.values(), key=lambda c: order[c.point.name])


def judge(check: Check, predicted: FigureValues, measured: FigureValues, *, tolerance: float,
          saturated_predicted: bool | None, saturated_measured: bool | None) -> SpotCheck:
    """How a spot check went: the errors of each figure, and whether it passed (see the module docstring)."""
    err = errors(predicted, measured)
    miss = worst(err)
    notes = []
    passed = miss is not None and miss <= tolerance
    if miss is None:
        notes.append("no figure to compare")
    elif miss > tolerance:
        notes.append(f"a figure is {miss:.1%} off, beyond the tolerance of {tolerance:.0%}")
    if saturated_predicted and saturated_measured is False:
        passed = False
        notes.append("the prediction saturated the server here, the measurement did not")
    return SpotCheck(point=check.point.name, pair=check.pair, why=check.why, predicted=predicted, measured=measured,
                     errors=err, passed=passed, saturated_predicted=saturated_predicted,
                     saturated_measured=saturated_measured, note="; ".join(notes) or None)


def pair_points(points: Sequence[Point], pair: str, measured: Collection[str],
                saturated: Sequence[Point]) -> tuple[list[Point], list[tuple[Point, str]]]:
    """The points of ``pair`` still to measure after its check missed, in suite order, and those a measured
    saturation leaves out (with why), as the suite would: a closed-loop count above one of ``saturated`` (the
    measured points that saturated the server) is not run."""
    run, skipped = [], []
    for p in points:
        if pair_of(p) != pair or p.measures_prefill or p.name in measured:
            continue
        by = [s for s in saturated if skips_after_saturation(s, p)]
        if by:
            skipped.append((p, f"not run: the server saturated at {min(s.parallel or 1 for s in by)} parallel"))
        else:
            run.append(p)
    return run, skipped
