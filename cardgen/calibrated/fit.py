"""The fit: the free constants (:mod:`cardgen.calibrated.perf`) that make the virtual server reproduce the measured
points, with their uncertainty.

Each measured figure is a residual ``log(fitted / measured)`` (relative errors: a 3 % miss weighs the same on a
TTFT of 20 ms as on a throughput of 2,000 tok/s), and the fit minimises a robust loss of them, soft-L1 with a
scale of :data:`ROBUST_SCALE`: a residual of a few per cent counts as in least squares, one of 100 % about ten
times less. A figure the virtual server cannot reproduce at all (on vLLM's CPU build, a stream whose text arrives
in one burst at its end gives a TTFT equal to its E2E latency) then drags the constants far less than in least
squares, and the figures that are right stay reproduced; it stays in the residuals, and the spot checks judge
the predictions it concerns. An ingestion sweep's median TTFTs at each prompt length are
weighted so that the sweep counts as :data:`INGEST_WEIGHT` figures together. The constants are fitted as logs
(they stay positive) by Levenberg-Marquardt, each residual's derivative by a forward difference of
:data:`STEP` (a 3 % change of a constant) over a virtual evaluation of the measured points
(:func:`cardgen.calibrated.replay.replay`). A weak prior holds each constant to its initial value (a factor
:data:`PRIOR_FACTOR` is one standard deviation, worth a residual of the noise level): a constant the
measurements cannot see stays where it started, with a wide interval, instead of wandering.

Uncertainty: with ``s`` the residuals' standard deviation (never below :data:`NOISE_FLOOR`), the constants' log
covariance is ``s^2 (J'WJ + (s / ln PRIOR_FACTOR)^2 I)^-1`` at the optimum (``W`` the robust loss's weights); their 95 % intervals are
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
ROBUST_SCALE = 0.10  # soft-L1 loss: residuals well under 10 % count as in least squares
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


def _loss(r: np.ndarray) -> float:
    """Soft-L1: 2 c^2 (sqrt(1 + (r / c)^2) - 1), c = ROBUST_SCALE."""
    c = ROBUST_SCALE
    return float(np.sum(2 * c * c * (np.sqrt(1 + (r / c) ** 2) - 1)))


def _weights(r: np.ndarray) -> np.ndarray:
    """Each residual's weight in a Gauss-Newton step of the soft-L1 loss (1 for small ones)."""
    return 1.0 / np.sqrt(1 + (r / ROBUST_SCALE) ** 2)


def fit(goals: Sequence[Target], evaluate: Evaluate, start: Constants, *, initial: Sequence[Constants] = (),
        max_iterations: int = 25, tolerance: float = 1e-4) -> Fit:
    """Levenberg-Marquardt on the robust loss from the best of ``initial`` (default: ``start``), the prior
    centred there (see the module docstring); ``start`` is reported as where the fit began."""
    began = time.perf_counter()
    if not goals:
        raise ValueError("nothing to fit: the measured points gave no figure")
    candidates = list(initial) or [start]
    scored = [(_loss(_residuals(goals, evaluate(c))), i) for i, c in enumerate(candidates)]
    theta0 = candidates[min(scored)[1]].log()
    k, n = len(theta0), len(goals)
    prior = NOISE_FLOOR / math.log(PRIOR_FACTOR)
    evaluations = len(candidates)

    def residual_vector(theta: np.ndarray) -> tuple[np.ndarray, Figures]:
        nonlocal evaluations
        evaluations += 1
        figures = evaluate(Constants.from_log(theta))
        return _residuals(goals, figures), figures

    def cost_of(theta: np.ndarray, r: np.ndarray) -> float:
        p = prior * (theta - theta0)
        return _loss(r) + float(p @ p)

    def jacobian(theta: np.ndarray, r: np.ndarray) -> np.ndarray:
        cols = []
        for i in range(k):
            moved = theta.copy()
            moved[i] += STEP
            cols.append((residual_vector(moved)[0] - r) / STEP)
        return np.column_stack(cols)

    theta = theta0.copy()
    r, figures = residual_vector(theta)
    cost = cost_of(theta, r)
    lam, iterations, converged = 1e-2, 0, False
    J = jacobian(theta, r)
    for iteration in range(1, max_iterations + 1):
        iterations = iteration
        root = np.sqrt(_weights(r))
        Jw = np.vstack([J * root[:, None], prior * np.eye(k)])
        rw = np.concatenate([r * root, prior * (theta - theta0)])
        A, g = Jw.T @ Jw, Jw.T @ rw
        accepted, improvement, step = False, 0.0, np.zeros(k)
        for _ in range(8):
            try:
                step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            step = np.clip(step, -2.0, 2.0)  # at most a factor e^2 a step
            r_new, figures_new = residual_vector(theta + step)
            cost_new = cost_of(theta + step, r_new)
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
    w = _weights(r)
    dof = max(1.0, float(w.sum()) - k)
    s = max(NOISE_FLOOR, math.sqrt(float((w * r) @ r) / dof)) if n > k else NOISE_FLOOR
    Jd = J * np.sqrt(w)[:, None] / s
    covariance = np.linalg.inv(Jd.T @ Jd + (1.0 / math.log(PRIOR_FACTOR)) ** 2 * np.eye(k))
    residuals = []
    for t in goals:
        value = figures.get(t.point, {}).get(t.figure)
        if value is not None:
            residuals.append(Residual(point=t.point, figure=t.figure, measured=t.measured, fitted=float(value),
                                      error=float(value) / t.measured - 1.0))
    logs = sorted(abs(math.log(1 + x.error)) for x in residuals if x.error > -1)
    report = FitReport(iterations=iterations, evaluations=evaluations, seconds=round(time.perf_counter() - began, 2),
                       rms_residual=math.sqrt(sum(u * u for u in logs) / len(logs)) if logs else None,
                       median_residual=logs[len(logs) // 2] if logs else None, figures=n, converged=converged)
    return Fit(start=start, constants=Constants.from_log(theta), covariance=covariance, residuals=residuals,
               report=report)
