# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which patches the standard library for gevent)
"""A load over HTTP: ``cardgen build`` against a server at ``--url``, one started with ``--launch``, or the
virtual server on loopback (``--real-time``), measured in real time by the load engine; and ``cardgen resume``
of such a run. Imports Locust before anything else."""

from __future__ import annotations

from cardgen.load.stage import LoadConfig, execute, finish, run_load  # first: Locust patches ssl for gevent

import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import click
import yaml

from cardgen.calibrated.loadmeasure import LoadMeasurer
from cardgen.calibrated.steps import Start, calibrate
from cardgen.cli.options import parse_workers
from cardgen.cli.price import price_for, record_price
from cardgen.cli.render import render_card
from cardgen.engines.detect import check_url
from cardgen.engines.launch import launched_engine
from cardgen.engines.lora import LoraModule, check_served
from cardgen.engines.registry import ENGINES, engine_name, get_adapter
from cardgen.errors import UsageError
from cardgen.load.progress import PlannedTime
from cardgen.load.resume import prepare_resume
from cardgen.numbers import duration_text
from cardgen.points import expand, suite_adapters
from cardgen.redact import MASK
from cardgen.rundir import SERVER_LOG, check_run_dir, default_run_dir, make_run_dir, run_dirs
from cardgen.runinfo import load_seconds
from cardgen.runwriter import suite_of
from cardgen.schemas.run import RunInfo
from cardgen.sim.catalog import read_data, resolve
from cardgen.sim.launch import running_sim
from cardgen.sim.modelled import ModelledServer
from cardgen.sim.roofline import list_engines
from cardgen.sim.served import ServedModel
from cardgen.suite import Suite


def build_measured(model: str, *, url: str | None, launch: str | None, real_time: bool, suite_name: str,
                   suite: Suite, gpus: Sequence[str], out_dir: Path | None, runs_root: Path, api_key: str | None,
                   workers: str, remote_workers: bool, master_bind: str, master_port: int, engine: str | None,
                   engine_args: str, model_config: Path | None, tp: int, gpu_given: bool,
                   gpu_metrics_url: str | None, scrape_interval: float, run_saturated: bool, no_card: bool,
                   quiet: bool, served: ServedModel | None = None, lora_modules: Sequence[str] = (),
                   price_per_hour: float | None = None, calibrate: float | None = None) -> None:
    """``cardgen build`` over HTTP: the server at ``url`` or started with ``launch`` (one GPU type), or with
    ``real_time`` the virtual server of each GPU on loopback (its model doing what ``served`` says). An engine
    started with ``launch`` serves ``lora_modules`` (``NAME=PATH``) too. ``calibrate``: the spot checks' tolerance of a
    calibrated run (:mod:`cardgen.calibrated`), None for a measured one."""
    if launch and lora_modules:
        modules = [LoraModule.parse(spec) for spec in lora_modules]
        check_served(modules, suite_adapters(expand(suite)))
        engine_args = shlex.join([*shlex.split(engine_args), *get_adapter(launch).lora_args(modules)])
    common = dict(suite_name=suite_name, suite=suite, runs_root=runs_root, api_key=api_key, workers=workers,
                  remote_workers=remote_workers, master_bind=master_bind, master_port=master_port,
                  engine_args=engine_args, model_config=model_config, tp=tp, gpu_metrics_url=gpu_metrics_url,
                  scrape_interval=scrape_interval, run_saturated=run_saturated, no_card=no_card, quiet=quiet,
                  price_per_hour=price_per_hour, calibrate=calibrate)
    if url or launch:
        if len(gpus) > 1:
            raise UsageError("several --gpu write one modelled run each: a measured server has one GPU type")
        if real_time:
            raise UsageError("--real-time is for the virtual server: a server at --url or --launch is measured in "
                             "real time already")
        adapter, profile = engine_choice(engine)
        measure(model, url=url, launch=launch, out_dir=out_dir, engine=adapter, gpu=gpus[0], profile=profile,
                gpu_given=gpu_given, **common)  # type: ignore[arg-type]
        return
    servers = [ModelledServer(model=model, gpu=g, tp=tp, model_config=model_config, engine=engine or "vllm",
                              served=served or ServedModel()) for g in gpus]
    for server in servers:
        server.check()
    for server, run_dir in zip(servers, run_dirs(model, gpus, out_dir=out_dir, runs_root=runs_root), strict=True):
        measure(model, url=None, launch=None, out_dir=run_dir, engine=None, gpu=server.gpu, profile=server.engine,
                gpu_given=True, virtual=server, **common)  # type: ignore[arg-type]


def check_server_options(*, url: str | None, launch: str | None, gpu_metrics_url: str | None, workers: int | str,
                         scrape_interval: float) -> int | str:
    """One-line errors for options that cannot work, before any server starts; the parsed ``--workers``."""
    if url and launch:
        raise UsageError("give either --url (a running server) or --launch (start one), not both")
    if url:
        check_url(url)
    if gpu_metrics_url:
        check_url(gpu_metrics_url)
    if scrape_interval < 0.1:
        raise UsageError("--scrape-interval must be at least 0.1 s: scraping faster loads the server you measure")
    return parse_workers(workers)


def engine_choice(engine: str | None) -> tuple[str | None, str]:
    """``--engine`` against a real server: the adapter it forces (None: detect), and the engine profile its cost
    plan models. An adapter name (vllm, sglang, tgi, llamacpp, openai) or a profile name (vllm-0.6 forces the
    vllm adapter and plans with the 0.6 profile); anything else is a one-line UsageError."""
    if engine is None:
        return None, "vllm"
    profiles = {p.lower(): p for p in list_engines()}
    key = engine.strip().lower()
    if key in profiles:
        profile = profiles[key]
        return engine_name(profile.split("-")[0]), profile
    try:
        adapter = engine_name(engine)
    except UsageError:
        raise UsageError(f"unknown engine {engine!r}: give an engine ({', '.join(ENGINES)}) or an engine profile "
                         f"({', '.join(profiles.values())})") from None
    return adapter, profile_of_adapter(adapter)


def profile_of_adapter(adapter: str) -> str:
    """The engine profile a real server's cost plan models for its adapter (vLLM V1 when there is none)."""
    return adapter if adapter in list_engines() else "vllm"


def measure(model: str, *, url: str | None, launch: str | None, suite_name: str, suite: Suite,
            out_dir: Path | None, runs_root: Path, api_key: str | None, workers: str, remote_workers: bool,
            master_bind: str, master_port: int, engine: str | None, engine_args: str, gpu: str,
            model_config: Path | None, tp: int, profile: str, gpu_given: bool, gpu_metrics_url: str | None,
            scrape_interval: float, run_saturated: bool, no_card: bool, quiet: bool,
            virtual: ModelledServer | None = None, price_per_hour: float | None = None,
            calibrate: float | None = None) -> None:
    """Measure a server over HTTP with the load engine, in real time: the one at ``url``, one started with
    ``launch``, or the virtual server ``virtual`` on loopback; then write the card. With ``calibrate`` (the spot
    checks' tolerance), a calibrated run (:func:`measure_calibrated`)."""
    count = check_server_options(url=url, launch=launch, gpu_metrics_url=gpu_metrics_url, workers=workers,
                                 scrape_interval=scrape_interval)
    name = model_name(model)
    run_dir = out_dir or default_run_dir(name, root=runs_root)
    check_run_dir(run_dir)  # before any server starts; missing parents are created with the run directory
    cfg = LoadConfig(url=url or "", model=name, suite=suite, run_dir=run_dir, api_key=api_key, workers=count,
                     remote_workers=remote_workers, master_bind_host=master_bind, master_port=master_port,
                     scrape_interval_s=scrape_interval, quiet=quiet, engine=engine, gpu_metrics_url=gpu_metrics_url,
                     run_saturated=run_saturated,
                     gpu={"name": gpu, "name_source": "as given with --gpu"} if gpu_given and virtual is None else {})
    if calibrate is not None:
        start = Start(model=model, model_config=model_config, gpu=gpu, tp=tp, profile=profile, tolerance=calibrate)
        start.shape()  # a model the virtual server cannot describe fails here, before any server starts
        with measured_server(cfg, model=model, launch=launch, engine_args=engine_args, virtual=virtual) as cfg:
            measure_calibrated(cfg, start, quiet=quiet)
    else:
        with plan_in_background(suite_name, model=model, gpu=gpu, tp=tp, model_config=model_config,
                                modelled=virtual is not None, gpu_given=gpu_given, engine=profile) as plan:
            with measured_server(replace(cfg, plan=plan), model=model, launch=launch, engine_args=engine_args,
                                 virtual=virtual) as cfg:
                result = run_load(cfg)
            planned = plan() if plan is not None else None
        if planned is not None and not quiet:
            click.echo(f"cardgen: the load took {duration_text(load_seconds(result.info) * tp)} of GPU time (planned "
                       f"~{duration_text(planned.gpu_time_s)})", err=True)
    record_price(run_dir, price_for(price_per_hour, gpu))
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def model_name(model: str) -> str:
    """The model's name on the card: a GGUF file given as the model (``--launch llamacpp``) is named by its stem."""
    return Path(model).stem if model.lower().endswith(".gguf") else model


def measure_calibrated(cfg: LoadConfig, start: Start, *, quiet: bool) -> None:
    """A calibrated run against the server ``cfg`` points at (:func:`cardgen.calibrated.steps.calibrate`), and
    what it took: the GPU time, against measuring every point as the fitted server plans it."""
    began = time.monotonic()
    info = calibrate(LoadMeasurer(cfg), start, say=(lambda line: None) if quiet else
                     (lambda line: click.echo(f"cardgen: {line}", err=True)))
    if not quiet:
        cal = info.calibration
        full = f"; measuring every point would take ~{duration_text(cal.full_plan_gpu_time_s)} (the fitted server's " \
               "plan)" if cal is not None and cal.full_plan_gpu_time_s else ""
        click.echo(f"cardgen: the calibrated run took {duration_text(load_seconds(info) * start.tp)} of GPU time "
                   f"({duration_text(time.monotonic() - began)} in all){full}", err=True)


@contextmanager
def measured_server(cfg: LoadConfig, *, model: str, launch: str | None, engine_args: str,
                    virtual: ModelledServer | None) -> Iterator[LoadConfig]:
    """``cfg`` pointed at the server to measure, which runs while the block does: the one at ``cfg.url``, an
    engine started with ``launch`` (its log in the run directory), or ``virtual`` (checked already)."""

    if cfg.url:
        yield cfg
    elif launch:
        make_run_dir(cfg.run_dir)  # the server's log goes there before the load
        args = shlex.split(engine_args)
        added, chosen = get_adapter(launch).launch_defaults(expand(cfg.suite), args)
        if chosen and not cfg.quiet:
            click.echo(f"cardgen: starting {launch} with {shlex.join(added)} ("
                       + "; ".join(f"{flag} {why}" for flag, why in chosen.items()) + ")", err=True)
        with launched_engine(launch, model, engine_args=[*args, *added], log_path=cfg.run_dir / SERVER_LOG) as handle:
            launched = {**handle.launch_info, "chosen": chosen} if chosen else handle.launch_info
            yield replace(cfg, url=handle.url, launch=launched, engine=cfg.engine or launch)
    elif virtual is not None:
        make_run_dir(cfg.run_dir)  # the server's log goes there before the load
        if not cfg.quiet:
            click.echo("cardgen: --real-time: measuring the built-in VIRTUAL GPU server over HTTP. Every figure of this "
                       f"card is MODELLED for {virtual.model} on {virtual.tp}x {virtual.gpu_name}, not measured.",
                       err=True)
        with running_sim(virtual.argv, log_path=cfg.run_dir / SERVER_LOG) as sim:
            yield replace(cfg, url=sim.url, modelled=True, sim=virtual.describe(sim.describe), engine="cardgen-sim",
                          gpu=virtual.gpu_info())
    else:
        raise UsageError("no server to measure: give --url or --launch")


class BackgroundPlan:
    """``cardgen plan --json`` in a process of its own, started before the server so that it runs while the
    server starts and the load begins (planning the full suite takes about 20 s of CPU: in this process it
    would hold the GIL against the event loop that stamps chunk arrivals). Calling it answers at once: the
    plan once the process is done, None before (or when planning failed: the run goes on without).

    ``suite`` is a suite's name or file, or the suite itself (a resumed run's, from run.json); ``done`` names
    the points an earlier session finished: the line then says what is left."""

    def __init__(self, argv: Sequence[str], *, suite: str | Suite, modelled_as: str,
                 done: Collection[str] = ()) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="cardgen-plan-")
        self._out = Path(self._dir.name) / "plan.json"
        self.modelled_as, self.done = modelled_as, frozenset(done)
        self._result: PlannedTime | None = None
        self._finished = False
        if not isinstance(suite, str):
            path = Path(self._dir.name) / "suite.yaml"
            path.write_text(yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
            suite = str(path)
        with self._out.open("wb") as out:  # a file, not a pipe: a large plan never blocks the planner
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cardgen", "plan", *argv, "--suite", suite, "--json"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)

    def __call__(self) -> PlannedTime | None:
        if not self._finished and self.process.poll() is not None:
            self._finished = True
            if self.process.returncode == 0:
                self._result = self._read()
        return self._result

    def _read(self) -> PlannedTime | None:
        try:
            data = json.loads(self._out.read_text("utf-8"))
            points = data["points"]
            seconds = {str(p["name"]): 0.0 if p.get("skipped") else float(p["seconds"]) for p in points}
            gpu_time_s, tp = float(data["gpu_time_s"]), int(data["tp"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        left = [p for p in points if p["name"] not in self.done]
        running = sum(1 for p in left if not p.get("skipped"))
        skipped = len(left) - running
        if self.done:  # what is left: the points' own seconds (the pauses between them are left out)
            gpu_time_s = sum(seconds[p["name"]] for p in left) * tp
        line = (f"plan: {running} point{'' if running == 1 else 's'}" + (" left" if self.done else "")
                + (f" ({skipped} skipped at saturation)" if skipped else "")
                + f", ~{duration_text(gpu_time_s)} of GPU time ({self.modelled_as})")
        return PlannedTime(seconds_by_point=seconds, gpu_time_s=gpu_time_s, line=line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._dir.cleanup()


@contextmanager
def plan_in_background(suite: str | Suite, *, model: str, gpu: str, tp: int, model_config: Path | None,
                       modelled: bool, gpu_given: bool, done: Collection[str] = (),
                       engine: str = "vllm") -> Iterator[BackgroundPlan | None]:
    """The cost plan of the run while the block runs, when the model and GPU are known: always for the virtual
    server; for a real one only when the virtual server knows the model (a preset, or --model-config) and
    --gpu was given. None otherwise: nothing is said about a cost cardgen cannot model."""
    if not modelled:
        if not gpu_given or (model_config is None and resolve(model, read_data("models.yaml")) is None):
            yield None
            return
    argv = [model, "--gpu", gpu, "--tp", str(tp), "--engine", engine]
    if model_config is not None:
        argv += ["--model-config", str(model_config)]
    plan = BackgroundPlan(argv, suite=suite, done=done, modelled_as="modelled" if modelled else
                          f"modelled by the virtual server for {model} on {tp}x {gpu}")
    try:
        yield plan
    finally:
        plan.close()


def resume_measured(run_dir: Path, info: RunInfo, *, url: str | None, api_key: str | None, workers: str | None,
                    remote_workers: bool, master_bind: str, master_port: int, engine: str | None, launch: str | None,
                    engine_args: str, model_config: Path | None, gpu_metrics_url: str | None,
                    scrape_interval: float, run_saturated: bool, no_card: bool, quiet: bool) -> None:
    """Continue a run measured over HTTP against the server it measured, then write its card."""
    count = check_server_options(url=url, launch=launch, gpu_metrics_url=gpu_metrics_url,
                                 workers=info.workers if workers is None else workers, scrape_interval=scrape_interval)
    virtual = None
    launched = info.server.launch
    if not url and not launch:
        if info.modelled and info.sim is not None:
            virtual = ModelledServer.of_run(info, model_config=model_config)
            virtual.check()
        elif launched is not None and launched.engine:
            launch = launched.engine
            args = list(launched.engine_args)
            if any(MASK in a for a in args):
                raise UsageError(f"the run started {launch} with a secret among its arguments (not saved): give "
                                 f"--launch {launch} --engine-args '...' again")
            engine_args = shlex.join(args)
        else:
            url = info.server.url
    cfg = LoadConfig(url=url or "", model=info.model, suite=suite_of(info), run_dir=run_dir, api_key=api_key,
                     workers=count, remote_workers=remote_workers, master_bind_host=master_bind,
                     master_port=master_port, scrape_interval_s=scrape_interval, quiet=quiet, engine=engine,
                     gpu_metrics_url=gpu_metrics_url,
                     run_saturated=run_saturated or "--run-saturated" in info.command)  # as the run began
    planning = nullcontext() if virtual is None else plan_in_background(
        cfg.suite, model=virtual.model, gpu=virtual.gpu, tp=virtual.tp, model_config=virtual.model_config,
        modelled=True, gpu_given=True, done=[o.name for o in info.points if o.ended], engine=virtual.engine)
    started_with = launched.arguments.get("model") if launched is not None else None  # a GGUF's path, say
    with planning as plan, measured_server(replace(cfg, plan=plan), model=str(started_with or info.model),
                                           launch=launch, engine_args=engine_args, virtual=virtual) as cfg:
        prepared = prepare_resume(cfg, info)
        finish(prepared, execute(prepared))
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))
