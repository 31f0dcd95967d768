"""The fit: the free constants (:mod:`cardgen.calibrated.perf`) that make the virtual server reproduce the measured
points, with their uncertainty.

Each measured figure is a residual ``log(fitted / measured)`` (relative errors: a 3 % miss weighs the same on a
TTFT of 20 ms as on a throughput of 2,000 tok/s). An ingestion sweep's median TTFTs at each prompt length are
weighted so that the sweep counts as :data:`INGEST_WEIGHT` figures together. The constants are fitted as logs
(they stay positive) by Levenberg-Marquardt, each residual's derivative by a forward difference of
:data:`STEP` (a 3 % change of a constant) over a virtual evaluation of the measured points
(:func:`cardgen.calibrated.replay.replay`). A weak prior holds each constant to its starting value (a factor
:data:`PRIOR_FACTOR` is one standard deviation, worth a residual of the noise level): a constant the
measurements cannot see stays where it started, with a wide interval, instead of wandering.

Uncertainty: with ``s`` the residuals' standard deviation (never below :data:`NOISE_FLOOR`), the constants' log
covariance is ``s^2 (J'J + (s / ln PRIOR_FACTOR)^2 I)^-1`` at the optimum; their 95 % intervals are
``exp(log value +- 1.96 sd)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cardgen.calibrated.figures import log_ratio
from cardgen.calibrated.perf import SPECS, Constants
from cardgen.schemas.calibration import FitReport, FittedConstant, Residual

STEP = 0.03  # forward difference of a log constant
INGEST_WEIGHT = 2.0  # an ingestion sweep's TTFTs together weigh as much as this many figures
PRIOR_FACTOR = 10.0  # one prior standard deviation of a constant, as a factor on its starting value
NOISE_FLOOR = 0.01  # the residuals' standard deviation is taken to be at least this (1 %)
MISSING = 1.0  # the residual of a figure the fitted server does not produce (a point it failed, say)
Z95 = 1.959964

Figures = Mapping[str, Mapping[str, float]]  # {point: {figure: value}}
Evaluate = Callable[[Constants], Figures]


@dataclass(frozen=True)
class Target:
    """One measured figure the fit reproduces."""

    point: str
    figure: str
    measured: float
    weight: float = 1.0


def targets(measured: Figures) -> list[Target]:
    """Every measured figure as a target; an ingestion sweep's TTFTs share :data:`INGEST_WEIGHT`."""
    out: list[Target] = []
    for point, figures in measured.items():
        ingest = [f for f in figures if f.startswith("ttft_s@")]
        weight = math.sqrt(INGEST_WEIGHT / len(ingest)) if ingest else 1.0
        for figure, value in figures.items():
            out.append(Target(point, figure, float(value), weight if figure in ingest else 1.0))
    return out


@dataclass(frozen=True)
class Fit:
    """The fitted constants, their log covariance, and how the fit went."""

    start: Constants
    constants: Constants
    covariance: np.ndarray  # of the log constants
    residuals: list[Residual]
    report: FitReport

    def sd(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    def described(self, *, references: Mapping[str, float | None]) -> list[FittedConstant]:
        """run.json's ``calibration.constants``; ``references``: the named GPU's peak of each rate."""
        sd = self.sd()
        out = []
        for i, spec in enumerate(SPECS):
            value = self.constants.values[i]
            out.append(FittedConstant(name=spec.name, label=spec.label, unit=spec.unit, start=self.start.values[i],
                                      value=value, low=value * math.exp(-Z95 * sd[i]),
                                      high=value * math.exp(Z95 * sd[i]), reference=references.get(spec.name)))
        return out


def _residuals(goals: Sequence[Target], figures: Figures) -> np.ndarray:
    r = np.empty(len(goals))
    for i, t in enumerate(goals):
        value = figures.get(t.point, {}).get(t.figure)
        ratio = log_ratio(value, t.measured)
        r[i] = (MISSING if math.isnan(ratio) else ratio) * t.weight
    return r


def fit(goals: Sequence[Target], evaluate: Evaluate, start: Constants, *, max_iterations: int = 25,
        tolerance: float = 1e-4) -> Fit:
    """Levenberg-Marquardt from ``start`` (see the module docstring)."""
    began = time.perf_counter()
    if not goals:
        raise ValueError("nothing to fit: the measured points gave no figure")
    theta0 = start.log()
    k, n = len(theta0), len(goals)
    prior = NOISE_FLOOR / math.log(PRIOR_FACTOR)
    evaluations = 0

    def residual_vector(theta: np.ndarray) -> tuple[np.ndarray, Figures]:
        nonlocal evaluations
        evaluations += 1
        figures = evaluate(Constants.from_log(theta))
        return np.concatenate([_residuals(goals, figures), prior * (theta - theta0)]), figures

    def jacobian(theta: np.ndarray, r: np.ndarray) -> np.ndarray:
        cols = []
        for i in range(k):
            moved = theta.copy()
            moved[i] += STEP
            cols.append((residual_vector(moved)[0] - r) / STEP)
        return np.column_stack(cols)

    theta = theta0.copy()
    r, figures = residual_vector(theta)
    cost = float(r @ r)
    lam, iterations, converged = 1e-2, 0, False
    J = jacobian(theta, r)
    for iteration in range(1, max_iterations + 1):
        iterations = iteration
        A = J.T @ J
        g = J.T @ r
        accepted, improvement = False, 0.0
        for _ in range(8):
            try:
                step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            step = np.clip(step, -2.0, 2.0)  # at most a factor e^2 a step
            r_new, figures_new = residual_vector(theta + step)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                accepted = True
                improvement = (cost - cost_new) / max(cost, 1e-12)
                theta, r, figures, cost = theta + step, r_new, figures_new, cost_new
                lam = max(lam / 5, 1e-6)
                break
            lam *= 5
        if not accepted or improvement < tolerance or float(np.max(np.abs(step))) < 1e-3:
            converged = True  # no step lowers the cost any more, or the last one barely did
            break
        J = jacobian(theta, r)
    data = r[:n]
    dof = max(1, n - k)
    s = max(NOISE_FLOOR, math.sqrt(float(data @ data) / dof)) if n > k else NOISE_FLOOR
    Jd = J[:n] / s
    precision = Jd.T @ Jd + (1.0 / math.log(PRIOR_FACTOR)) ** 2 * np.eye(k)
    covariance = np.linalg.inv(precision)
    residuals = []
    for t in goals:
        value = figures.get(t.point, {}).get(t.figure)
        if value is not None:
            residuals.append(Residual(point=t.point, figure=t.figure, measured=t.measured, fitted=float(value),
                                      error=float(value) / t.measured - 1.0))
    unweighted = [math.log(1 + x.error) for x in residuals]
    report = FitReport(iterations=iterations, evaluations=evaluations, seconds=round(time.perf_counter() - began, 2),
                       rms_residual=math.sqrt(sum(u * u for u in unweighted) / len(unweighted)) if unweighted else None,
                       figures=n, converged=converged)
    return Fit(start=start, constants=Constants.from_log(theta), covariance=covariance, residuals=residuals,
               report=report)
