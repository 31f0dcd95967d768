"""What a calibrated run will cost, before any server runs (``cardgen plan ... --calibrate``).

The plan runs the calibration itself in virtual time (:func:`cardgen.calibrated.steps.calibrate` against a
:class:`~cardgen.calibrated.measurer.VirtualMeasurer` of the virtual server the plan models), so it lists exactly
the points a calibrated build measures on such a server: the identify points, the spot checks, and the time the
server waits while the fit and the prediction are computed (on this machine). GPU time is the measured phases'
wall time, waits included, times the GPUs. Beside it: the same suite measured point by point, and what measuring
a pair instead costs when its spot check misses.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cardgen.calibrated.measurer import VirtualMeasurer
from cardgen.calibrated.predict import pair_of
from cardgen.calibrated.steps import DEFAULT_TOLERANCE, Start, calibrate
from cardgen.numbers import duration_text
from cardgen.points import expand
from cardgen.runinfo import load_seconds
from cardgen.sim.config import SimConfig, build_perf
from cardgen.suite import Suite

GOAL_GPU_TIME_S = 30 * 60  # issue 21: the reference grid calibrated in 30 minutes of GPU time


@dataclass(frozen=True)
class PhasePoint:
    name: str
    requests: int
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class CalibratedPlan:
    model: str
    gpu: str
    tp: int
    suite: str
    tolerance: float
    identify: list[PhasePoint]
    spot_checks: list[PhasePoint]
    pairs: list[PhasePoint]  # measured point by point after their pair's spot check missed (on the plan's server)
    wait_s: float  # the fit and the prediction, while the server waits (computed on this machine)
    gpu_time_s: float
    full_gpu_time_s: float | None  # the same suite measured point by point
    fallback_s: dict[str, float] = field(default_factory=dict)  # measuring a pair instead, per pair
    computed_in_s: float = 0.0

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.identify + self.spot_checks + self.pairs)

    def to_json(self) -> str:
        data = asdict(self)
        data["requests"] = self.requests
        data["goal_gpu_time_s"] = GOAL_GPU_TIME_S
        return json.dumps(data, indent=2)


def make_calibrated_plan(suite: Suite, config: SimConfig, *, tolerance: float = DEFAULT_TOLERANCE,
                         gpu_name: str | None = None) -> CalibratedPlan:
    """The calibrated run of ``suite`` against the virtual server ``config`` describes (see the module
    docstring); the fit starts from the same engine profile and GPU."""
    began = time.perf_counter()
    perf = build_perf(config)
    with tempfile.TemporaryDirectory(prefix="cardgen-calibrated-plan-") as tmp:
        measurer = VirtualMeasurer(config, perf, suite, Path(tmp) / "run", gpu_name=gpu_name)
        info = calibrate(measurer, Start(model=config.model, model_config=config.model_config, gpu=config.gpu,
                                         tp=config.tp, profile=config.engine, tolerance=tolerance))
    cal = info.calibration
    assert cal is not None
    outcomes = {p.name: p for p in info.points}

    def phase(names: list[tuple[str, str]]) -> list[PhasePoint]:
        out = []
        for name, why in names:
            o = outcomes.get(name)
            if o is not None and o.started_unix is not None and o.ended_unix is not None:
                out.append(PhasePoint(name, o.requests, round(o.ended_unix - o.started_unix, 3), why))
        return out

    identify = phase([(i.name, i.why) for i in cal.identify])
    checks = phase([(c.point, c.why) for c in cal.spot_checks])
    named = {p.name for p in identify + checks}
    pairs = phase([(p.name, "its pair's spot check missed") for p in info.points if p.name not in named])
    measured = sum(p.seconds for p in identify + checks + pairs)
    gpu_time = load_seconds(info) * config.tp
    by_name = {p.name: p for p in expand(suite)}
    fallback: dict[str, float] = {}
    for p in cal.predictions:  # each pair's points left predicted, as the prediction ran them
        point = by_name.get(p.point)
        pair = pair_of(point) if point is not None else None
        if pair is not None and p.requests:
            fallback[pair] = fallback.get(pair, 0.0) + (p.seconds or 0.0)
    return CalibratedPlan(model=config.model, gpu=gpu_name or config.gpu, tp=config.tp, suite=suite.name,
                          tolerance=tolerance, identify=identify, spot_checks=checks, pairs=pairs,
                          wait_s=round(max(0.0, gpu_time / config.tp - measured), 1), gpu_time_s=round(gpu_time, 1),
                          full_gpu_time_s=cal.full_plan_gpu_time_s,
                          fallback_s={k: round(v * config.tp, 1) for k, v in sorted(fallback.items())},
                          computed_in_s=round(time.perf_counter() - began, 1))


def format_calibrated_plan(plan: CalibratedPlan) -> str:
    """The plan as text: each phase's points, the wait, the total against the goal and the point-by-point plan."""
    width = max([len("point")] + [len(p.name) for p in plan.identify + plan.spot_checks + plan.pairs])
    lines = [f"Calibrated plan for {plan.model} on {plan.tp}x {plan.gpu}, suite '{plan.suite}' (modelled by the "
             "virtual server; the calibration run in virtual time against it)"]
    for title, points in (("1. identify", plan.identify), ("4. spot checks", plan.spot_checks),
                          ("4. pairs measured instead", plan.pairs)):
        if not points and title.endswith("instead"):
            continue
        lines.append(f"{title}: {len(points)} points")
        lines.append(f"  {'point':<{width}}  {'requests':>8}  {'seconds':>9}")
        lines += [f"  {p.name:<{width}}  {p.requests:>8}  {p.seconds:>9.1f}" for p in points]
        if title.startswith("1."):
            lines.append(f"2.-3. fit and prediction: the server waits {duration_text(plan.wait_s)} (computed on "
                         "this machine)")
    goal = "within" if plan.gpu_time_s <= GOAL_GPU_TIME_S else "OVER"
    total = (f"total: {plan.requests} requests, {duration_text(plan.gpu_time_s)} of GPU time ({plan.tp} GPU"
             f"{'s' if plan.tp > 1 else ''}), {goal} the goal of {duration_text(GOAL_GPU_TIME_S)}")
    if plan.full_gpu_time_s:
        total += f"; point by point: {duration_text(plan.full_gpu_time_s)}"
    lines.append(total)
    if plan.fallback_s:
        worst = max(plan.fallback_s.items(), key=lambda kv: kv[1])
        lines.append(f"a spot check that misses by more than {plan.tolerance:.0%} has its pair measured point by "
                     f"point instead: up to +{duration_text(worst[1])} (pair {worst[0]}); "
                     f"all pairs: +{duration_text(sum(plan.fallback_s.values()))}")
    lines.append(f"(planned in {plan.computed_in_s:.0f} s)")
    return "\n".join(lines)
