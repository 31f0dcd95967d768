"""The cost plan: what a suite will cost in GPU time on a model and GPU, before any server runs.

:func:`make_plan` runs the suite's points on the virtual server in virtual time (:func:`cardgen.sim.drive.drive`,
by the same rules the load engine obeys: precision targets, skipping after saturation, searches) and
reads off each point's requests and seconds. GPU time is the run's wall time (from the first request to the
end of the last, with the pauses between points) times the GPUs the server holds (``tp``).

The plan is a model: the virtual server's steps vary by 2 % (``MODELLED_STEP_JITTER``), so precision targets
stop about where a steady real server would; a noisier server runs longer, up to each point's caps. A modelled
``cardgen build`` is the same run, so its plan lists exactly the points it runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from cardgen.numbers import duration_text
from cardgen.points import expand, fit_context
from cardgen.sim.config import SimConfig, build_perf, max_model_len
from cardgen.sim.drive import T0, drive
from cardgen.sim.modelled import modelled_options
from cardgen.suite import Suite


@dataclass(frozen=True)
class PlannedPoint:
    name: str
    kind: str
    requests: int
    seconds: float
    skipped: str | None = None  # why the point will not run (the server saturates before it)


@dataclass(frozen=True)
class CostPlan:
    model: str
    gpu: str
    tp: int
    suite: str
    points: list[PlannedPoint]
    wall_s: float
    gpu_time_s: float
    price_per_hour: float | None = None
    left_out: tuple[str, ...] = ()  # points that do not fit the served context, with why

    @property
    def cost(self) -> float | None:
        return None if self.price_per_hour is None else self.gpu_time_s / 3600.0 * self.price_per_hour

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.points)

    def to_json(self) -> str:
        data = asdict(self)
        data["cost"] = self.cost
        data["requests"] = self.requests
        data["left_out"] = list(self.left_out)
        return json.dumps(data, indent=2)


def make_plan(suite: Suite, config: SimConfig, *, price_per_hour: float | None = None,
              run_saturated: bool = False) -> CostPlan:
    """Predict ``suite`` on the virtual server ``config`` describes (model, GPU, tp, engine profile): the run
    ``cardgen build`` would model, timed the same way (:func:`cardgen.sim.modelled.modelled_options`)."""
    perf = build_perf(config)
    points, left_out = fit_context(expand(suite), max_model_len(config, perf))
    run = drive(points, config, perf=perf, options=modelled_options(start_unix=T0, scrapes=False),
                run_saturated=run_saturated)
    planned = [PlannedPoint(name=p.name, kind=p.kind, requests=p.requests, seconds=round(p.duration_s, 3),
                            skipped=p.skipped) for p in run.points]
    wall = max(0.0, max(((p.ended_unix or 0.0) for p in run.points), default=0.0)
               - min((p.started_unix for p in run.points if p.started_unix is not None), default=0.0))
    return CostPlan(model=config.model, gpu=config.gpu, tp=config.tp, suite=suite.name, points=planned,
                    wall_s=round(wall, 3), gpu_time_s=round(wall * config.tp, 3), price_per_hour=price_per_hour,
                    left_out=tuple(left_out))


def format_plan(plan: CostPlan, *, limit: int | None = None) -> str:
    """The plan as a table: one line per point, then the totals."""
    rows: Sequence[PlannedPoint] = plan.points if limit is None else plan.points[:limit]
    width = max([len("point")] + [len(p.name) for p in rows])
    lines = [f"Plan for {plan.model} on {plan.tp}x {plan.gpu}, suite '{plan.suite}' (modelled by the virtual "
             "server)", f"{'point':<{width}}  {'requests':>8}  {'seconds':>9}"]
    for p in rows:
        if p.skipped:
            lines.append(f"{p.name:<{width}}  {'-':>8}  {'-':>9}  not run: {p.skipped}")
        else:
            lines.append(f"{p.name:<{width}}  {p.requests:>8}  {p.seconds:>9.1f}")
    if limit is not None and len(plan.points) > limit:
        lines.append(f"... {len(plan.points) - limit} more points")
    for why in plan.left_out:
        lines.append(f"left out: {why}")
    total = (f"total: {plan.requests} requests, {duration_text(plan.wall_s)} wall, "
             f"{plan.gpu_time_s / 3600:.2f} GPU-hours ({plan.tp} GPU{'s' if plan.tp > 1 else ''})")
    if plan.cost is not None:
        total += f", about {plan.cost:,.2f} at {plan.price_per_hour:g} per GPU-hour"
    lines.append(total)
    return "\n".join(lines)
