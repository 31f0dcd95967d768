"""A calibrated run's predicted points: analysed from the fitted server's records as measured points are from
theirs, marked ``basis: predicted``, and put in suite order among the measured ones.

A calibrated run (``cardgen build --calibrate``, :mod:`cardgen.calibrated`) measures some points and predicts the
rest with a virtual server fitted to the measured ones. The prediction's requests are in ``predicted.jsonl`` and
its ``/metrics`` in ``predicted_metrics.jsonl``, on a virtual clock of their own; run.json's ``calibration`` says
which points are predicted, how the prediction ran each one, the 95 % interval of each figure from the fit's
uncertainty, and the spot check that vouches for it. A predicted point's figures are in the same fields as a
measured one's; the intervals on its medians are the fit's (a bootstrap over modelled requests would say
nothing about the prediction), and ``prediction`` holds them all, the output throughput's included.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from cardgen.analysis.outcomes import silent_summary
from cardgen.analysis.requests import request_frame
from cardgen.analysis.rundata import RunData
from cardgen.analysis.scenarios import scenario_summaries
from cardgen.analysis.timeseries import server_timeseries
from cardgen.points import Point
from cardgen.schemas.calibration import PREDICTED, PointPrediction
from cardgen.schemas.run import PointOutcome
from cardgen.schemas.summary import Distribution, ScenarioSummary

VIRTUAL_ENGINE = "cardgen-sim"  # whose metric names the fitted server's /metrics use


def _with_interval(d: Distribution, low: float | None, high: float | None) -> None:
    d.p50_ci_low, d.p50_ci_high = low, high


def _mark(s: ScenarioSummary, p: PointPrediction, target_ci: float | None) -> ScenarioSummary:
    s.basis, s.prediction, s.target_ci = PREDICTED, p, target_ci
    s.stop, s.stop_detail, s.saturation = p.stop, p.detail, p.saturation
    _with_interval(s.speed_from_start_tok_s, p.low.speed_from_start_tok_s, p.high.speed_from_start_tok_s)
    _with_interval(s.decode_tok_s, p.low.decode_tok_s, p.high.decode_tok_s)
    _with_interval(s.ttft_s, p.low.ttft_s, p.high.ttft_s)
    return s


def predicted_frame(data: RunData) -> pd.DataFrame:
    """The predicted requests of the points the run left predicted (an empty frame for any other run)."""
    cal = data.info.calibration
    if cal is None or not data.predicted:
        return pd.DataFrame()
    frame = request_frame(data.predicted)
    return frame[frame["scenario"].isin({p.point for p in cal.predictions})].reset_index(drop=True)


def predicted_scenarios(data: RunData, frame: pd.DataFrame, *, points: Mapping[str, Point], slo_ttft_s: float,
                        slo_tpot_s: float) -> list[ScenarioSummary]:
    """Every predicted point of a calibrated run, analysed (see the module docstring); a point the prediction
    did not run (saturated before it) gets a row that says so."""
    cal = data.info.calibration
    if cal is None:
        return []
    ts = server_timeseries(data.predicted_metrics, engine=VIRTUAL_ENGINE)
    analysed = {s.scenario: s for s in (scenario_summaries(frame, ts, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s)
                                        if not frame.empty else [])}
    out = []
    for p in cal.predictions:
        point = points.get(p.point)
        s = analysed.get(p.point) or silent_summary(
            PointOutcome(name=p.point, kind=point.kind if point else "closed", stop=p.stop, detail=p.detail), point)
        out.append(_mark(s, p, point.target_ci() if point is not None else None))
    return out


def in_suite_order(measured: list[ScenarioSummary], predicted: list[ScenarioSummary],
                   order: list[str]) -> list[ScenarioSummary]:
    """Measured and predicted scenarios together in suite order; what the suite does not list (a calibration's
    own probe) first, as it ran first."""
    if not predicted:
        return measured
    by_name = {s.scenario: s for s in predicted}
    by_name.update({s.scenario: s for s in measured})  # a measured point is never shown predicted
    listed = set(order)
    return [s for s in measured if s.scenario not in listed] + [by_name[n] for n in order if n in by_name]
