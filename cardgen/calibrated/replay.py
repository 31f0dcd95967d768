"""Virtual evaluations: points replayed on a fitted server in virtual time, cheaply.

The fit evaluates the measured points many times, and the prediction's intervals need every point once per
constant, so a replay runs each point with a fixed number of requests instead of its stopping rule: a closed loop
:data:`ROUNDS` rounds (at least :data:`MIN_REQUESTS` requests), an ingestion sweep once, a batch size twice;
with no step jitter, so that a replay is a deterministic function of the constants (finite differences need
that). The points of a kind without a cheaper replay (``Kind.cheap``) run as the suite has them. The figures come from the same analysis as the card's
(:mod:`cardgen.calibrated.figures`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cardgen.calibrated.figures import figures_of_records
from cardgen.calibrated.settings import ServerSettings
from cardgen.kinds import kind_of
from cardgen.kinds.kind import ReplayBudget
from cardgen.points import Point
from cardgen.schemas.run import PointOutcome
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.modelled import MODELLED_STEP_JITTER
from cardgen.sim.perf import PerfModel

ROUNDS = 6
SEED = 7919  # every replay draws the same step jitter: common random numbers, so differences are the constants'
MIN_REQUESTS = 8


def virtual_config(settings: ServerSettings, *, served_model: str = "calibrated") -> SimConfig:
    """The virtual server that runs a fitted PerfModel: the measured server's chunked prefill and context."""
    return SimConfig(model=served_model, perf="fixed", chunked_prefill=settings.chunked_prefill,
                     max_model_len=settings.max_model_len)


def network_s(perf: PerfModel) -> float:
    """The one-way delay the driver adds for a fitted server's request overhead (half each way; 0 otherwise)."""
    return float(getattr(perf, "request_overhead_s", 0.0)) / 2


def cheap(point: Point, requests: int | None = None) -> Point:
    """``point`` with a fixed, small number of requests (see the module docstring); a closed loop with
    ``requests`` when given (a measured point replayed as it ran)."""
    kind = kind_of(point)
    if kind.cheap is None:  # run as the suite has it
        return point
    return replace(point, params=kind.cheap(point, ReplayBudget(rounds=ROUNDS, min_requests=MIN_REQUESTS,
                                                                requests=requests)))


@dataclass(frozen=True)
class Replayed:
    """The figures of every point replayed (``{point: {figure: value}}``) and how each point ran."""

    figures: dict[str, dict[str, float]]
    outcomes: dict[str, PointOutcome]


def replay(points: Sequence[Point], perf: PerfModel, settings: ServerSettings, *, run_saturated: bool = True,
           requests: Mapping[str, int] | None = None) -> Replayed:
    """``points`` (those of a kind ``replayed``: :mod:`cardgen.kinds`) on ``perf`` in virtual time, each :func:`cheap` (a closed
    loop with ``requests[name]`` requests when given); with ``run_saturated`` False, the larger counts of a pair
    that saturated are skipped, as the suite would."""
    requests = requests or {}
    pts = [cheap(p, requests.get(p.name)) for p in points if kind_of(p).replayed]
    if not pts:
        return Replayed({}, {})
    run = drive(pts, virtual_config(settings), perf=perf,
                options=DriveOptions(start_unix=0.0, lead_s=0.0, scrapes=False, network_s=network_s(perf),
                                     step_jitter=MODELLED_STEP_JITTER, seed=SEED),
                run_saturated=run_saturated)
    return Replayed(figures_of_records(run.records), {p.name: p.outcome() for p in run.points})
