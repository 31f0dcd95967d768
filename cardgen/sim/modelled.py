"""A modelled server: the virtual GPU server ``cardgen build MODEL`` measures when it is given no server, and
its run in virtual time.

:class:`ModelledServer` is what the command line asks to model (model, GPU, tensor parallel, engine profile) and
how to start it again (``cardgen resume`` of a ``--real-time`` run). :func:`modelled_run` computes a suite's run
on it in virtual time (:mod:`cardgen.sim.drive`, the same scenario programs and controller the load engine
runs), with the step jitter of :data:`MODELLED_STEP_JITTER`, and writes the run directory ``cardgen render``
reads: a full suite in seconds, where measuring the virtual server over HTTP takes as long as a real run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cardgen.buildconfig import BuildConfig, VirtualTarget
from cardgen.errors import UsageError
from cardgen.points import Point, expand, fit_context, suite_adapters
from cardgen.runinfo import begin_run_info
from cardgen.runwriter import RunWriter, plan_resume, suite_of
from cardgen.schemas.records import MetricSample
from cardgen.schemas.run import COMPLETE, INTERRUPTED, PointOutcome, RunInfo
from cardgen.sim.config import SimConfig, build_perf, max_model_len
from cardgen.sim.drive import DrivenRequest, DriveOptions, drive, probe_answer
from cardgen.sim.hardware import is_gpu_file, load_gpu_file
from cardgen.sim.perf import PerfModel
from cardgen.sim.roofline import list_engines
from cardgen.sim.served import ServedModel

#: the modelled run's steps vary by this relative standard deviation around the model's: about a steady real
#: server's noise, so precision targets stop about where they would on one (the plan uses the same)
MODELLED_STEP_JITTER = 0.02


def modelled_options(*, start_unix: float, scrapes: bool = True) -> DriveOptions:
    """How a modelled run (and its plan) is timed: the same for both, so a plan lists what a build runs."""
    return DriveOptions(start_unix=start_unix, step_jitter=MODELLED_STEP_JITTER, scrapes=scrapes)


def check_engine_profile(engine: str) -> str:
    """``engine`` if it names an engine profile of the virtual server; else a one-line UsageError."""
    known = list_engines()
    match = next((name for name in known if name.lower() == engine.strip().lower()), None)
    if match is None:
        raise UsageError(f"unknown engine profile {engine!r}: the virtual server models {', '.join(known)}")
    return match


@dataclass(frozen=True, kw_only=True)
class ModelledServer:
    """The built-in virtual GPU server as the command line describes it."""

    model: str
    gpu: str
    tp: int = 1
    model_config: Path | None = None
    engine: str = "vllm"  # the engine profile
    served: ServedModel = ServedModel()  # what its model does besides answering (reasoning, speculation, LoRA)

    def check(self) -> None:
        """A one-line UsageError, before anything runs, for an unknown model, GPU or engine profile, or a missing
        config file."""
        if self.model_config is not None and not self.model_config.is_file():
            raise UsageError(f"--model-config {self.model_config} does not exist")
        if self.tp < 1:
            raise UsageError("--tp must be 1 or more")
        check_engine_profile(self.engine)
        build_perf(self.config())

    def config(self) -> SimConfig:
        return SimConfig(model=self.model, gpu=self.gpu, tp=self.tp, model_config=self.model_config,
                         engine=check_engine_profile(self.engine), served=self.served)

    @property
    def gpu_name(self) -> str:
        """The GPU's name for the card: a preset's, or a GPU file's own ``name`` (else its file name), never the
        file's path."""
        return load_gpu_file(Path(self.gpu)).name if is_gpu_file(self.gpu) else self.gpu

    @property
    def argv(self) -> list[str]:
        """``cardgen serve-sim``'s arguments for this server, without its address."""
        argv = [self.model, "--gpu", self.gpu, "--tp", str(self.tp), "--engine", self.engine]
        if self.model_config is not None:
            argv += ["--model-config", str(self.model_config)]
        return argv + self.served.argv()

    def describe(self, described: Mapping[str, Any]) -> dict[str, Any]:
        """run.json's ``sim``: the server's own description, and how to start it again."""
        sim = dict(described)
        if self.model_config is not None:
            sim["model_config"] = str(self.model_config.resolve())
        return sim

    def gpu_info(self) -> dict[str, Any]:
        """run.json's ``gpu`` of a modelled run."""
        return {"name": self.gpu_name, "count": self.tp, "modelled": True}

    @classmethod
    def of_build(cls, config: BuildConfig, *, gpu: str) -> ModelledServer:
        """The virtual server ``config`` builds on ``gpu`` (one of its GPUs): its model serving the adapters its
        suite asks for, doing what its served-model flags say."""
        target = config.target
        served = ServedModel()
        if isinstance(target, VirtualTarget):
            served = ServedModel.of_options(**target.served.model_dump(),
                                            adapters=suite_adapters(expand(config.parsed_suite)))
        return cls(model=config.model, gpu=gpu, tp=target.tp, model_config=target.model_config_path,
                   engine=target.engine or "vllm", served=served)

    @classmethod
    def of_run(cls, info: RunInfo, *, model_config: Path | None = None) -> ModelledServer:
        """The virtual server a modelled run measured, from run.json's ``sim`` (``model_config`` replaces the
        one it names)."""
        sim = info.sim
        if sim is None or not sim.gpu:
            raise UsageError("run.json does not say which virtual server the run measured (its 'sim' names no GPU): "
                             "give --url of a server to resume against")
        config = model_config or sim.model_config_path
        return cls(model=sim.model or info.model, gpu=sim.gpu, tp=sim.tp, model_config=Path(config) if config else None,
                   engine=sim.engine_profile or "vllm", served=ServedModel.of_described(sim.model_extra or {}))


def _appender(writer: RunWriter) -> Callable[[Sequence[DrivenRequest], Sequence[MetricSample]], None]:
    """Append what the driver has done since the last call: it hands over every request and scrape so far."""
    written = [0, 0]

    def append(requests: Sequence[DrivenRequest], scrapes: Sequence[MetricSample]) -> None:
        writer.append(records=[d.record for d in requests[written[0]:]], scrapes=scrapes[written[1]:])
        written[:] = len(requests), len(scrapes)

    return append


def modelled_run(server: ModelledServer, build: BuildConfig, run_dir: Path, *, argv: Sequence[str],
                 started_unix: float) -> RunInfo:
    """``build``'s suite on ``server``, in virtual time from ``started_unix``, written to ``run_dir`` as it goes
    (run.json says ``clock: virtual`` and ``modelled``, and keeps ``build``). A Ctrl-C leaves the run
    ``interrupted``, resumable."""
    suite = build.parsed_suite
    config = server.config()
    perf = build_perf(config)
    answer = probe_answer(config, perf, started_unix=started_unix)
    points, warnings = fit_context(expand(suite), max_model_len(config, perf))
    if not points:
        raise UsageError(f"no point of suite '{suite.name}' fits the server's context of "
                         f"{max_model_len(config, perf)} tokens: use shorter prompts and outputs")
    info = begin_run_info(argv=argv, model=config.model, suite=suite, server=answer, started_unix=started_unix,
                          clock="virtual", modelled=True, gpu=server.gpu_info(),
                          sim={**answer.extra["sim"], **server.describe({}), "clock": "virtual",
                               "drive": modelled_options(start_unix=started_unix).described()}, warnings=warnings,
                          points=[PointOutcome(name=p.name, kind=p.kind) for p in points], build=build)
    return _run(config, perf, RunWriter.begin(run_dir, info), points, started_unix=started_unix,
                run_saturated=build.load.run_saturated)


def resume_modelled(run_dir: Path, info: RunInfo, *, started_unix: float,
                    model_config: Path | None = None) -> RunInfo:
    """Continue the modelled run in ``run_dir`` (``clock: virtual``) that was cut off: its points that did not end,
    in virtual time from ``started_unix`` on a virtual server started afresh, appended to the same files, as the
    run was built (run.json's ``build``: ``--run-saturated``)."""
    server = ModelledServer.of_run(info, model_config=model_config)
    server.check()
    config = server.config()
    perf = build_perf(config)
    points, _ = fit_context(expand(suite_of(info)), max_model_len(config, perf))
    resumed = plan_resume(info, points)
    writer = RunWriter.resume(run_dir, info, resumed, when=started_unix)
    return _run(config, perf, writer, resumed.to_run, started_unix=started_unix,
                run_saturated=info.ran_saturated(), attempts=resumed.attempts)


def _run(config: SimConfig, perf: PerfModel, writer: RunWriter, points: Sequence[Point], *, started_unix: float,
         run_saturated: bool, attempts: Mapping[str, int] | None = None) -> RunInfo:
    """Drive ``points``, written as each ends (a cut-off point's records too) with run.json's outcome: a Ctrl-C
    keeps every point that ended on disk, and ``cardgen resume`` continues from there."""
    writer.open(attempts or {})  # a resumed run's tallies are the whole run's: what is on disk is counted first
    append = _appender(writer)

    def point_ended(outcome: PointOutcome, requests: Sequence[DrivenRequest], scrapes: Sequence[MetricSample]) -> None:
        append(requests, scrapes)
        writer.put_points(outcome)

    try:
        run = drive(points, config, perf=perf, options=modelled_options(start_unix=started_unix),
                    run_saturated=run_saturated, attempts=attempts, on_point_end=point_ended)
    except KeyboardInterrupt:
        reached = [p.ended_unix or p.started_unix for p in writer.info.points if p.started_unix is not None]
        writer.end(INTERRUPTED, ended_unix=max(reached, default=started_unix))  # type: ignore[type-var]
        raise
    append(run.requests, run.scrapes)
    return writer.end(COMPLETE, ended_unix=run.ended_unix)
