"""The prediction: every point of the suite on the fitted server, each figure with a 95 % interval from the fit's
uncertainty.

The card's predicted figures come from the suite run on the fitted server as a modelled build runs it
(:func:`cardgen.sim.modelled.modelled_options`: each point's own stopping rule, 2 % step jitter, skipping after
saturation), written as ``predicted.jsonl`` and analysed as measured records are. Their intervals come from the
constants' covariance, propagated to first order: each figure's derivative against each log constant is a forward
difference of :data:`cardgen.calibrated.fit.STEP` between cheap replays (:mod:`cardgen.calibrated.replay`), and
its log variance is ``g' C g``; the interval is ``value x exp(+-1.96 sd)``. It covers what the measured points
leave uncertain in the constants, not the model's own error: the spot checks measure that.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from cardgen.calibrated.figures import figures_of_records
from cardgen.calibrated.fit import STEP, Z95, Fit
from cardgen.calibrated.perf import Constants, FittedPerf
from cardgen.calibrated.replay import network_s, replay, virtual_config
from cardgen.calibrated.settings import ServerSettings
from cardgen.kinds import kind_of
from cardgen.points import Point
from cardgen.schemas.calibration import FIGURES, FigureValues, PointPrediction
from cardgen.schemas.records import MetricSample, RequestRecord
from cardgen.schemas.run import PointOutcome
from cardgen.sim.drive import T0, drive
from cardgen.sim.modelled import modelled_options
from cardgen.sim.roofline import RooflinePerf


@dataclass(frozen=True)
class Prediction:
    """The predicted run (records and scrapes, in virtual time from :data:`cardgen.sim.drive.T0`), how each
    point ran in it, and each point's figures with their intervals."""

    records: list[RequestRecord]
    scrapes: list[MetricSample]
    outcomes: dict[str, PointOutcome]
    points: dict[str, PointPrediction]
    seconds: float

    def duration_s(self, point: str) -> float:
        o = self.outcomes.get(point)
        return 0.0 if o is None or o.started_unix is None or o.ended_unix is None else o.ended_unix - o.started_unix


def pair_of(point: Point) -> str | None:
    """The prompt / output pair a point belongs to (``1024/128``); None for an ingestion sweep."""
    return None if point.measures_prefill else f"{point.prompt_tokens}/{point.output_tokens}"


def _sensitivities(points: Sequence[Point], shape: RooflinePerf, fit: Fit,
                   settings: ServerSettings) -> dict[str, dict[str, np.ndarray]]:
    """Each point's figures' derivatives against the log constants (cheap replays, every point run)."""
    theta = fit.constants.log()
    base = replay(points, FittedPerf(shape, fit.constants, settings), settings).figures
    moved = []
    for i in range(len(theta)):
        t = theta.copy()
        t[i] += STEP
        moved.append(replay(points, FittedPerf(shape, Constants.from_log(t), settings), settings).figures)
    out: dict[str, dict[str, np.ndarray]] = {}
    for point, figures in base.items():
        for name, value in figures.items():
            ups = [m.get(point, {}).get(name) for m in moved]
            if value > 0 and all(u is not None and u > 0 for u in ups):
                out.setdefault(point, {})[name] = np.array([(math.log(u) - math.log(value)) / STEP for u in ups if u is not None])
    return out


def predict(points: Sequence[Point], shape: RooflinePerf, fit: Fit, settings: ServerSettings, *,
            served_model: str, seed: int = 0) -> Prediction:
    """Run ``points`` (the suite's, fitted to the server's context) on the fitted server, and give every point's
    figures their intervals (see the module docstring)."""
    began = time.perf_counter()
    perf = FittedPerf(shape, fit.constants, settings)
    run = drive(points, virtual_config(settings, served_model=served_model), perf=perf,
                options=replace(modelled_options(start_unix=T0), seed=seed, network_s=network_s(perf)))
    figures = figures_of_records(run.records)
    grads = _sensitivities(points, shape, fit, settings)
    cov = fit.covariance
    predictions: dict[str, PointPrediction] = {}
    by_name = {p.name: p for p in points}
    for o in run.points:
        point = by_name[o.name]
        value, low, high = {}, {}, {}
        for name, _, _ in FIGURES:
            v = figures.get(o.name, {}).get(name)
            if v is None:
                continue
            value[name] = v
            g = grads.get(o.name, {}).get(name)
            if g is not None:
                sd = math.sqrt(max(0.0, float(g @ cov @ g)))
                low[name], high[name] = v * math.exp(-Z95 * sd), v * math.exp(Z95 * sd)
        predictions[o.name] = PointPrediction(point=o.name, pair=pair_of(point), value=FigureValues(**value),
                                              low=FigureValues(**low), high=FigureValues(**high),
                                              requests=o.requests, seconds=round(o.duration_s, 3),
                                              stop=o.stop, detail=o.detail,
                                              saturation=o.saturated if kind_of(o).watch_saturation else None)
    return Prediction(records=run.records, scrapes=run.scrapes, outcomes={p.name: p.outcome() for p in run.points},
                      points=predictions, seconds=round(time.perf_counter() - began, 2))
