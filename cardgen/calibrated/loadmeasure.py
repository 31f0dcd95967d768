# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which patches the standard library for gevent)
"""The server under calibration measured over HTTP by the load engine, in real time: the load stage's
:func:`~cardgen.load.stage.prepare` once (probe, prompts of every length the suite sends, run.json), then its
:func:`~cardgen.load.stage.execute` and :func:`~cardgen.load.stage.finish` once per phase, appending to the same
files as a resumed run does (the tallies are the whole run's), all through the run's one
:class:`~cardgen.runwriter.RunWriter`. Import this module before anything that imports
``ssl``."""

from __future__ import annotations

from cardgen.load.stage import LoadConfig, execute, finish, prepare  # first: Locust patches ssl for gevent

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import requests

from cardgen.points import Point
from cardgen.promtext import parse_metrics
from cardgen.schemas.calibration import CalibrationReport
from cardgen.schemas.records import MetricSample
from cardgen.schemas.run import RUNNING, PointOutcome, RunInfo


class LoadMeasurer:
    """:class:`~cardgen.calibrated.measurer.Measurer` of the server ``cfg``'s plan points at (see the module docstring)."""

    def __init__(self, cfg: LoadConfig) -> None:
        prepared = prepare(cfg)
        self.writer = prepared.writer
        self.writer.info.points = []  # run.json lists the points measured, as they run
        self.writer.save()
        self.prepared = replace(prepared, attempts={})
        self.warnings = list(self.writer.info.warnings)  # prepare's; each phase's finish adds the whole run's again
        self.run_dir = Path(cfg.plan.run_dir)
        self.server = prepared.server
        self.points: Sequence[Point] = prepared.points
        self.phases = 0

    def metrics(self) -> Sequence[MetricSample]:
        session = requests.Session()
        session.trust_env = False
        session.headers.update(self.prepared.setup.headers)
        t = time.time()
        try:
            resp = session.get(f"{self.prepared.base_url}/metrics", timeout=10)
        except requests.RequestException:
            return []
        if resp.status_code != 200:
            return []
        try:
            return [MetricSample(t=t, t_end=time.time(), samples=parse_metrics(resp.text))]
        except ValueError:
            return []

    def measure(self, points: Sequence[Point], *, phase: str) -> None:
        info = self.writer.info  # running again, while this phase measures
        info.status, info.ended_unix, info.ended_at = RUNNING, None, None
        info.warnings = list(self.warnings)
        attempts = {p.name: p.attempt for p in info.points} | {p.name: 0 for p in points}
        prepared = replace(self.prepared, points=tuple(points), attempts=attempts, resumed=self.phases > 0,
                           points_done=len(info.points), phase=f"calibrate: {phase}")
        finish(prepared, execute(prepared))
        self.phases += 1

    def not_run(self, outcomes: Sequence[PointOutcome]) -> None:
        self.writer.put_points(*outcomes)

    def finish(self, calibration: CalibrationReport) -> RunInfo:
        self.writer.info.calibration = calibration
        self.writer.save()
        return self.writer.info
