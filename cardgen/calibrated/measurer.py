"""What measures the points a calibration asks for, phase after phase, into one run directory.

A :class:`Measurer` is the server under calibration: the load engine over HTTP in real time
(:mod:`cardgen.calibrated.loadmeasure`), or, for tests and benchmarks, a virtual server in virtual time
(:class:`VirtualMeasurer`) that the calibration knows nothing about but what a real server would say of itself.
Each phase appends its records, scrapes and points to the run directory, as a resumed run does; run.json's
``points`` are the points measured, in the order they ran.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from cardgen.points import Point, expand, fit_context
from cardgen.runinfo import begin_run_info
from cardgen.runwriter import RunWriter
from cardgen.schemas.calibration import CalibrationReport
from cardgen.schemas.records import MetricSample
from cardgen.schemas.run import COMPLETE, PointOutcome, RunInfo, ServerInfo
from cardgen.sim.config import SimConfig, max_model_len
from cardgen.sim.drive import T0, DriveOptions, drive, probe_answer
from cardgen.sim.modelled import modelled_options
from cardgen.sim.perf import PerfModel
from cardgen.suite import Suite


class Measurer(Protocol):
    """The server under calibration, and the run directory its measurements go to."""

    run_dir: Path
    server: ServerInfo  # as probed before anything was measured
    points: Sequence[Point]  # the suite's points that fit the server's context, in suite order

    def metrics(self) -> Sequence[MetricSample]:
        """The server's ``/metrics`` now (one scrape; none when it has no metrics)."""
        ...

    def measure(self, points: Sequence[Point], *, phase: str) -> None:
        """Measure ``points`` in order (skipping after saturation as the suite does), appending to the run."""
        ...

    def not_run(self, outcomes: Sequence[PointOutcome]) -> None:
        """Record points left out (a measured saturation), with why, in run.json's ``points``."""
        ...

    def finish(self, calibration: CalibrationReport) -> RunInfo:
        """The run is over: run.json gets the calibration and its final status."""
        ...


NETWORK_S = 0.0005  # a request's way to a server on loopback and its answer's way back, each (HTTP handling)


def measured_options(*, start_unix: float, seed: int = 0) -> DriveOptions:
    """How :class:`VirtualMeasurer` measures a virtual server, and how a test measures the same server point by
    point for truth: a modelled run's step jitter, and :data:`NETWORK_S` each way. A delay of exactly 0 would
    be a server no real client has: a closed loop's next request would reach it the instant the last one
    ended, always in time for the next step, where any real one arrives after that step has begun."""
    return replace(modelled_options(start_unix=start_unix), seed=seed, network_s=NETWORK_S)


class VirtualMeasurer:
    """A virtual server measured in virtual time, as the load engine would measure it over HTTP: the same
    programs, a step jitter of 2 % and a network delay (:func:`measured_options`), its own ``/metrics``. Between
    phases its clock moves on by the real time the calibration took to compute (the server waits for it, and the
    GPU time counts it)."""

    def __init__(self, config: SimConfig, perf: PerfModel, suite: Suite, run_dir: Path, *,
                 argv: Sequence[str] = ("cardgen", "build", "--calibrate"), started_unix: float = T0,
                 gpu_name: str | None = None) -> None:
        self.config, self.perf, self.run_dir = config, perf, Path(run_dir)
        self.server = probe_answer(config, perf, started_unix=started_unix)
        points, warnings = fit_context(expand(suite), max_model_len(config, perf))
        self.points: Sequence[Point] = points
        info = begin_run_info(argv=argv, model=config.model, suite=suite, server=self.server,
                              started_unix=started_unix, clock="virtual", modelled=True,
                              gpu={"name": gpu_name or config.gpu, "count": config.tp, "modelled": True},
                              sim={**self.server.extra["sim"], "clock": "virtual",
                                   "drive": measured_options(start_unix=started_unix).described()},
                              warnings=warnings)
        self.writer = RunWriter.begin(self.run_dir, info)
        self.writer.open({})
        self.t = started_unix
        self.phases = 0
        self._wall = time.perf_counter()

    def metrics(self) -> Sequence[MetricSample]:
        return drive([], self.config, perf=self.perf, options=modelled_options(start_unix=self.t)).scrapes[:1]

    def measure(self, points: Sequence[Point], *, phase: str) -> None:
        if self.phases:
            self.t += time.perf_counter() - self._wall
        run = drive(points, self.config, perf=self.perf,
                    options=measured_options(start_unix=self.t, seed=self.phases))
        self.writer.append(records=run.records, scrapes=run.scrapes)
        self.writer.put_points(*(p.outcome() for p in run.points))
        self.t = run.ended_unix
        self.phases += 1
        self._wall = time.perf_counter()

    def not_run(self, outcomes: Sequence[PointOutcome]) -> None:
        self.writer.put_points(*outcomes)

    def finish(self, calibration: CalibrationReport) -> RunInfo:
        self.writer.info.calibration = calibration
        return self.writer.end(COMPLETE, ended_unix=self.t)
