"""A modelled server: the virtual GPU server ``cardgen build MODEL`` measures when it is given no server, and
its run in virtual time.

:class:`ModelledServer` is what the command line asks to model (model, GPU, tensor parallel, engine profile) and
how to start it again (``cardgen resume`` of a ``--real-time`` run). :func:`modelled_run` computes a suite's run
on a virtual server in virtual time (:mod:`cardgen.sim.drive`, the same scenario programs and controller the load
engine runs) and writes the run directory ``cardgen render`` reads as each point ends: a full suite in seconds,
where measuring the virtual server over HTTP takes as long as a real run. It is the only assembler of a modelled
run: ``cardgen build`` calls it (:func:`build_run`, with the step jitter of :data:`MODELLED_STEP_JITTER`), and so
do the tests, the site's sample and the committed fixture, so that what they check is the path users run;
:func:`resume_modelled` continues a run it left cut off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cardgen.buildconfig import BuildConfig, VirtualTarget
from cardgen.errors import UsageError
from cardgen.points import Point, expand, fit_context, left_out, suite_adapters
from cardgen.recorder import Lines
from cardgen.runinfo import begin_run_info
from cardgen.runwriter import RunWriter, plan_resume, suite_of
from cardgen.schemas.records import MetricSample, RequestRecord, WrittenScrapes
from cardgen.schemas.run import COMPLETE, INTERRUPTED, PointOutcome, PriceDescription, RunInfo
from cardgen.sim.config import SimConfig, build_perf, max_model_len
from cardgen.sim.drive import Drive, DrivenRequest, DriveOptions, drive, probe_answer
from cardgen.sim.hardware import is_gpu_file, load_gpu_file
from cardgen.sim.interrupts import at_safe_points
from cardgen.sim.metrics import Scraped
from cardgen.sim.perf import PerfModel
from cardgen.sim.roofline import list_engines
from cardgen.sim.served import ServedModel
from cardgen.stops import STOP_SKIPPED
from cardgen.suite import Suite

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
                                            adapters=suite_adapters(list(config.points)))
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


@dataclass(frozen=True)
class ModelledRun:
    """A modelled run as :func:`modelled_run` wrote it: its run.json (as saved last) and the driver's account of
    it (every request from both sides, the scrapes, the server), for a test that needs the server's side."""

    info: RunInfo
    drive: Drive  # its requests and scrapes are empty when they were streamed (``keep=False``)
    path: Path
    # every scrape as a reader of server_metrics.jsonl holds it, when they were held as they were written
    # (``hold_scrapes``: what the card of a fresh build is rendered from, not read back)
    scrapes: list[MetricSample] | None = None


class _Streamed:
    """A streamed run's sink (:class:`cardgen.sim.drive.DriveSink`): each request and scrape is appended as it
    happens, and forgotten."""

    def __init__(self, writer: RunWriter, *, hold_scrapes: bool = False,
                 on_record: Callable[[RequestRecord], None] | None = None) -> None:
        self.writer = writer
        self.on_record = on_record  # told of each record once it is written
        # each scrape also as a reader of the file holds it (the columns of its values, not its text)
        self.held = WrittenScrapes() if hold_scrapes else None

    def request(self, driven: DrivenRequest) -> None:
        self.writer.recorder.record(driven.record)
        if self.on_record is not None:
            self.on_record(driven.record)

    def scrape(self, scraped: Scraped) -> None:
        self.writer.recorder.scrape_line(scraped)
        if self.held is not None:
            self.held.add(scraped.line.encode(), t=scraped.t, t_end=scraped.t_end, values=scraped.values,
                          layout=scraped.layout)


def modelled_run(suite: Suite, config: SimConfig, run_dir: Path, *, argv: Sequence[str],
                 options: DriveOptions | None = None, perf: PerfModel | None = None, run_saturated: bool = False,
                 gpu: Mapping[str, Any] | None = None, sim: Mapping[str, Any] | None = None,
                 build: BuildConfig | None = None, price: PriceDescription | None = None,
                 keep: bool = True, hold_scrapes: bool = False,
                 on_record: Callable[[RequestRecord], None] | None = None,
                 lines: Lines | None = None) -> ModelledRun:
    """``cardgen build`` against the virtual server ``config`` describes (``perf`` overrides the performance model
    it builds), in virtual time as ``options`` times it, written to ``run_dir`` as it goes: the suite's points
    that fit the served context, skipping after saturation unless ``run_saturated``. run.json is what the load
    stage would write (``modelled``, engine ``cardgen-sim``, ``clock: virtual``, the virtual server's own
    description with ``sim`` added, ``gpu`` (default: ``config``'s, modelled), ``build`` kept for a resume,
    ``price`` written with the first run.json). A Ctrl-C leaves the run ``interrupted``, resumable
    (:func:`resume_modelled`).

    The one way a modelled run is made: ``cardgen build`` with no server calls it (with
    :func:`modelled_options`), and so do the tests, the site's sample and the committed fixture. ``keep``: the
    driver's account keeps every request and scrape (for a test); otherwise each is written as it happens and
    forgotten (``cardgen build``: memory bounded by what is in flight), with the same files; ``hold_scrapes`` (with
    ``keep`` off) holds every scrape as a reader of the file would (:attr:`ModelledRun.scrapes`), for the card, and
    ``on_record`` (with ``keep`` off) is told of each record as it is written (a build makes them its card's rows).
    ``lines``: where the run's lines go instead of its files (another process writes them: :mod:`.beside`)."""
    opts = options or DriveOptions()
    model = build_perf(config) if perf is None else perf
    answer = probe_answer(config, model, started_unix=opts.start_unix)
    every, max_len = expand(suite), max_model_len(config, model)
    points, warnings = fit_context(every, max_len)
    # a point none of whose requests fits is listed as not run, with why, as a measured run lists it
    unfit = left_out(every, max_len)
    warnings = [w for w in warnings if not any(w.startswith(f"{name} left out") for name in unfit)]
    if not points:
        raise UsageError(f"no point of suite '{suite.name}' fits the server's context of "
                         f"{max_model_len(config, model)} tokens: use shorter prompts and outputs")
    if not config.metrics:
        warnings.append("the server has no Prometheus /metrics: no server-side figures (KV usage, queue)")
    info = begin_run_info(argv=argv, model=config.model, suite=suite, server=answer, started_unix=opts.start_unix,
                          clock="virtual", modelled=True,
                          gpu=gpu or {"name": config.gpu, "count": config.tp, "modelled": True},
                          sim={**answer.extra["sim"], **(sim or {}), "clock": "virtual", "drive": opts.described()},
                          warnings=warnings, points=_outcomes(every, {p.name for p in points}, unfit),
                          build=build, price=price)
    return _run(config, model, RunWriter.begin(run_dir, info), points, options=opts, run_saturated=run_saturated,
                keep=keep, hold_scrapes=hold_scrapes, on_record=on_record, lines=lines)


def _outcomes(every: Sequence[Point], runnable: set[str], unfit: dict[str, str]) -> list[PointOutcome]:
    """run.json's first account of the points, in the suite's order: those to run (none reached yet) and those left
    out whole, not run, with why."""
    return [PointOutcome(name=p.name, kind=p.kind) if p.name in runnable else
            PointOutcome(name=p.name, kind=p.kind, stop=STOP_SKIPPED, detail=unfit[p.name])
            for p in every if p.name in runnable or p.name in unfit]


def build_run(server: ModelledServer, build: BuildConfig, run_dir: Path, *, argv: Sequence[str],
              started_unix: float, price: PriceDescription | None = None, hold_scrapes: bool = False,
              on_record: Callable[[RequestRecord], None] | None = None, lines: Lines | None = None) -> ModelledRun:
    """``cardgen build``'s run of ``build`` on ``server`` (one of its GPUs), in virtual time from
    ``started_unix``: :func:`modelled_run` timed by :func:`modelled_options`, with the server's GPU and
    description, and ``build`` kept in run.json for ``cardgen resume`` (``hold_scrapes`` and ``on_record``: for its
    card; ``lines``: where its lines go, as :func:`modelled_run` takes them)."""
    return modelled_run(build.parsed_suite, server.config(), run_dir, argv=argv,
                        options=modelled_options(start_unix=started_unix), run_saturated=build.load.run_saturated,
                        gpu=server.gpu_info(), sim=server.describe({}), build=build, price=price, keep=False,
                        hold_scrapes=hold_scrapes, on_record=on_record, lines=lines)


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
    return _run(config, perf, writer, resumed.to_run, options=modelled_options(start_unix=started_unix),
                run_saturated=info.ran_saturated(), attempts=resumed.attempts, keep=False).info


def _run(config: SimConfig, perf: PerfModel, writer: RunWriter, points: Sequence[Point], *, options: DriveOptions,
         run_saturated: bool, attempts: Mapping[str, int] | None = None, keep: bool = True,
         hold_scrapes: bool = False, on_record: Callable[[RequestRecord], None] | None = None,
         lines: Lines | None = None) -> ModelledRun:
    """Drive ``points``, written as each ends (a cut-off point's records too) with run.json's outcome: a Ctrl-C
    keeps every point that ended on disk, and ``cardgen resume`` continues from there. Nothing is written twice
    and nothing waits for the run's end but its last scrapes and run.json's tallies. A Ctrl-C is taken between
    two events of the virtual clock (:func:`~cardgen.sim.interrupts.at_safe_points`), never while a line is made
    or written; one that comes after the last event is raised once run.json says the run is complete."""
    with at_safe_points():
        writer.open(attempts or {}, lines=lines)  # a resumed run's tallies are the whole run's: what is on disk is counted first
        written = [0, 0]  # the driver hands over every request and scrape so far: what was appended already

        def point_ended(outcome: PointOutcome, requests: Sequence[DrivenRequest], scrapes: Sequence[MetricSample]) -> None:
            append(requests, scrapes)
            writer.put_points(outcome)

        def append(requests: Sequence[DrivenRequest], scrapes: Sequence[MetricSample]) -> None:
            writer.append(records=[d.record for d in requests[written[0]:]], scrapes=scrapes[written[1]:])
            written[:] = len(requests), len(scrapes)

        sink = None if keep else _Streamed(writer, hold_scrapes=hold_scrapes, on_record=on_record)
        try:
            run = drive(points, config, perf=perf, options=options, run_saturated=run_saturated, attempts=attempts,
                        on_point_end=point_ended, sink=sink)
        except KeyboardInterrupt:
            reached = [t for p in writer.info.points if (t := p.ended_unix or p.started_unix) is not None]
            writer.end(INTERRUPTED, ended_unix=max(reached, default=options.start_unix))
            raise
        append(run.requests, run.scrapes)
        return ModelledRun(info=writer.end(COMPLETE, ended_unix=run.ended_unix), drive=run, path=writer.files.path,
                           scrapes=sink.held.held() if sink is not None and sink.held is not None else None)
