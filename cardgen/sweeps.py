"""The serving loads' sweeps over a run's points (:attr:`cardgen.kinds.Kind.sweep`): each kind's points per prompt /
output pair along its load axis, and throughput against interactivity over the sweeps over users (pure: the
figures, the card and the site's comparisons read them alike)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cardgen.kinds import KINDS, USERS, Kind, kind_of, of_kind
from cardgen.schemas.summary import ScenarioSummary

INTERACTIVITY_FIGURE = "throughput_interactivity.png"  # throughput against interactivity (cardgen.figures.render)


def _arr(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def sweep_pairs(scenarios: Sequence[ScenarioSummary], kind: str) -> dict[tuple[int, int], list[ScenarioSummary]]:
    """The points of ``kind`` its sweep draws (:attr:`cardgen.kinds.Kind.sweep`), per (prompt, output) pair in
    ascending order, each list in the sweep's order along its axis (a kind without a sweep: none)."""
    sweep = kind_of(kind).sweep
    if sweep is None:
        return {}
    pairs: dict[tuple[int, int], list[ScenarioSummary]] = {}
    for s in of_kind(kind, scenarios):
        if sweep.shown(s):
            pairs.setdefault((s.prompt_tokens, s.output_tokens), []).append(s)
    return {k: sorted(v, key=sweep.order) for k, v in sorted(pairs.items())}


def sweeps(scenarios: Sequence[ScenarioSummary], *, users: bool = False,
           ) -> list[tuple[Kind[Any], tuple[int, int], list[ScenarioSummary]]]:
    """Every installed kind's sweep over the run's points (:attr:`cardgen.kinds.Kind.sweep`), in the kinds' order,
    pair by pair: its kind, its (prompt, output) pair, its points along the sweep's axis (``users``: only the
    kinds whose sweep is over users in flight)."""
    return [(kind, pair, pts) for name, kind in KINDS.items()
            if kind.sweep is not None and (not users or kind.parallel == USERS)
            for pair, pts in sweep_pairs(scenarios, name).items()]


def pareto_front(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *, x_higher: bool = True,
                 y_higher: bool = True) -> np.ndarray:
    """Which points no other point dominates: another point dominates one when it is at least as good on both
    axes and better on one (``x_higher``: a larger x is better; else a smaller one). Points with a NaN coordinate
    are never on the front and dominate nothing; equal points are both on the front."""
    xs = np.asarray(x, dtype=float) * (1 if x_higher else -1)
    ys = np.asarray(y, dtype=float) * (1 if y_higher else -1)
    ok = np.isfinite(xs) & np.isfinite(ys)
    ge = (xs[None, :] >= xs[:, None]) & (ys[None, :] >= ys[:, None])  # [i, j]: j at least as good as i
    gt = (xs[None, :] > xs[:, None]) | (ys[None, :] > ys[:, None])
    dominated = (ge & gt & ok[None, :]).any(axis=1)
    return ok & ~dominated


@dataclass(frozen=True)
class InteractivityCurve:
    """One (prompt, output) pair of a sweep over users (the closed loop's), a point per parallel count: output throughput per GPU
    against what each user gets (median decode speed, tokens/s per user) and against the median TTFT, with the
    Pareto front of each plane (more throughput and more speed per user; more throughput and less TTFT)."""

    pair: tuple[int, int]
    parallel: np.ndarray
    tok_s_per_user: np.ndarray
    ttft_s: np.ndarray
    tok_s_per_gpu: np.ndarray
    front_user: np.ndarray  # bool: on the throughput / speed-per-user front
    front_ttft: np.ndarray  # bool: on the throughput / TTFT front
    # bool: predicted by a calibrated run's fitted server, not measured (drawn hollow); empty: all measured
    predicted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def throughput_interactivity(scenarios: Sequence[ScenarioSummary], *, gpus: int | None) -> list[InteractivityCurve]:
    """Per pair of a sweep over users (a closed loop's): the serving engineer's curve (SemiAnalysis InferenceX's):
    total output tokens/s divided by the GPUs serving (``gpus``; one when unknown) against tokens/s per user and
    against TTFT."""
    out = []
    for _, pair, pts in sweeps(scenarios, users=True):
        per_user = _arr([s.decode_tok_s.p50 for s in pts])
        ttft = _arr([s.ttft_s.p50 for s in pts])
        per_gpu = _arr([s.output_tok_s for s in pts]) / max(gpus or 1, 1)
        if not (np.isfinite(per_user) & np.isfinite(per_gpu)).any():
            continue
        out.append(InteractivityCurve(pair, _arr([s.parallel for s in pts]), per_user, ttft, per_gpu,
                                      pareto_front(per_user, per_gpu), pareto_front(ttft, per_gpu, x_higher=False),
                                      np.array([s.basis == "predicted" for s in pts], dtype=bool)))
    return out
