# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which patches the standard library for gevent)
"""A load over HTTP: ``cardgen build`` against a server at ``--url``, one started with ``--launch``, or the
virtual server on loopback (``--real-time``), measured in real time by the load engine; and ``cardgen resume``
of such a run. Imports Locust before anything else."""

from __future__ import annotations

from cardgen.load.stage import LoadConfig, execute, finish, run_load  # first: Locust patches ssl for gevent

import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cardgen.buildconfig import BuildConfig, LaunchTarget, ResumeConfig, UrlTarget, VirtualTarget
from cardgen.cli.planning import plan_in_background
from cardgen.cli.price import price_for
from cardgen.cli.render import render_card
from cardgen.engines.launch import launched_engine
from cardgen.engines.lora import LoraModule, check_served
from cardgen.engines.registry import ENGINES, engine_name, get_adapter
from cardgen.errors import UsageError
from cardgen.load.resume import prepare_resume
from cardgen.numbers import duration_text
from cardgen.points import expand, suite_adapters
from cardgen.redact import MASK
from cardgen.rundir import SERVER_LOG, make_run_dir, run_dirs
from cardgen.runinfo import RunPlan, load_seconds
from cardgen.runwriter import suite_of
from cardgen.schemas.run import RunInfo
from cardgen.sim.launch import running_sim
from cardgen.sim.modelled import ModelledServer
from cardgen.sim.roofline import list_engines

if TYPE_CHECKING:
    from cardgen.calibrated.steps import Start


def build_measured(config: BuildConfig, *, api_key: str | None = None) -> None:
    """``cardgen build`` over HTTP: the server at the config's URL or started with its ``launch`` (one GPU type),
    or with ``real_time`` the virtual server of each of its GPUs on loopback. An engine cardgen starts serves the
    config's LoRA modules too. A config with a ``calibrate_tolerance`` makes a calibrated run
    (:mod:`cardgen.calibrated`). ``api_key``: the server's bearer token (no part of the config: never saved).
    Each run directory is checked here, once, before any server starts (missing parents are created with it)."""
    target, out = config.target, config.outputs
    if isinstance(target, LaunchTarget) and target.lora_modules:
        check_served([LoraModule.parse(spec) for spec in target.lora_modules], suite_adapters(list(config.points)))
    if not isinstance(target, VirtualTarget):
        if len(target.gpus) > 1:
            raise UsageError("several --gpu write one modelled run each: a measured server has one GPU type")
        adapter, profile = engine_choice(target.engine)
        [run_dir] = run_dirs(model_name(config.model), target.gpus, out_dir=out.out_dir, runs_root=out.runs_root)
        measure(config, api_key=api_key, run_dir=run_dir, gpu=target.gpus[0], engine=adapter, profile=profile)
        return
    servers = [ModelledServer.of_build(config, gpu=g) for g in target.gpus]
    for server in servers:
        server.check()
    for server, run_dir in zip(servers, run_dirs(config.model, target.gpus, out_dir=out.out_dir,
                                                 runs_root=out.runs_root), strict=True):
        measure(config, api_key=api_key, run_dir=run_dir, gpu=server.gpu, engine=None, profile=server.engine,
                virtual=server)


def launch_args(target: LaunchTarget) -> str:
    """The engine's arguments: ``--engine-args``, and those that serve the target's LoRA modules."""
    if not target.lora_modules:
        return target.engine_args
    modules = [LoraModule.parse(spec) for spec in target.lora_modules]
    return shlex.join([*shlex.split(target.engine_args), *get_adapter(target.launch).lora_args(modules)])


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


def measure(config: BuildConfig, *, api_key: str | None, run_dir: Path, gpu: str, engine: str | None,
            profile: str, virtual: ModelledServer | None = None) -> None:
    """Measure one server of ``config`` over HTTP with the load engine, in real time, into ``run_dir`` (checked
    already): the one at its URL, one started with its ``launch``, or the virtual server ``virtual`` on loopback,
    on ``gpu``; ``engine`` forces the adapter, ``profile`` is the engine profile of its cost plan. Then write the
    card. With a ``calibrate_tolerance``, a calibrated run (:func:`measure_calibrated`). The run's
    :class:`RunPlan` is made here, once, with its price (written with the first run.json)."""
    target, out = config.target, config.outputs
    launch = target.launch if isinstance(target, LaunchTarget) else None
    plan = RunPlan(model=model_name(config.model), suite=config.parsed_suite, points=config.points, run_dir=run_dir,
                   load=config.load, quiet=out.quiet, url=target.url if isinstance(target, UrlTarget) else "",
                   engine=engine, gpu={"name": gpu, "name_source": "as given with --gpu"}
                   if target.gpu_given and virtual is None else {},
                   price=price_for(config.price_per_hour, gpu), build=config, argv=tuple(sys.argv))
    cfg = LoadConfig(plan=plan, api_key=api_key)
    engine_args = launch_args(target) if isinstance(target, LaunchTarget) else ""
    if config.calibrate_tolerance is not None:
        from cardgen.calibrated.steps import Start  # noqa: PLC0415  the fit (1 s of imports): a calibrated run's alone

        start = Start(model=config.model, model_config=target.model_config_path, gpu=gpu, tp=target.tp,
                      profile=profile, tolerance=config.calibrate_tolerance)
        start.shape()  # a model the virtual server cannot describe fails here, before any server starts
        with measured_server(cfg, model=config.model, launch=launch, engine_args=engine_args,
                             virtual=virtual) as cfg:
            measure_calibrated(cfg, start, quiet=out.quiet)
    else:
        with plan_in_background(config.suite.name, model=config.model, gpu=gpu, tp=target.tp,
                                model_config=target.model_config_path, modelled=virtual is not None,
                                gpu_given=target.gpu_given, engine=profile) as planning:
            with measured_server(replace(cfg, time_plan=planning), model=config.model, launch=launch,
                                 engine_args=engine_args, virtual=virtual) as cfg:
                result = run_load(cfg)
            planned, late = planning.after_load() if planning is not None else (None, False)
        if planned is not None and not out.quiet:
            if late:  # the load ended before the planner: the plan's line, once, before the comparison
                click.echo(planned.line, err=True)
            click.echo(f"cardgen: the load took {duration_text(load_seconds(result.info) * target.tp)} of GPU time "
                       f"(planned ~{duration_text(planned.gpu_time_s)})", err=True)
    if not out.no_card:
        render_card(run_dir, quiet=out.quiet)
    click.echo(str(run_dir))


def model_name(model: str) -> str:
    """The model's name on the card: a GGUF file given as the model (``--launch llamacpp``) is named by its stem."""
    return Path(model).stem if model.lower().endswith(".gguf") else model


def measure_calibrated(cfg: LoadConfig, start: Start, *, quiet: bool) -> None:
    """A calibrated run against the server ``cfg`` points at (:func:`cardgen.calibrated.steps.calibrate`), and
    what it took: the GPU time, against measuring every point as the fitted server plans it."""
    from cardgen.calibrated.loadmeasure import LoadMeasurer  # noqa: PLC0415  as measure's Start
    from cardgen.calibrated.steps import calibrate  # noqa: PLC0415  as measure's Start

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
    """``cfg`` pointed at the server to measure, which runs while the block does: the one at its plan's URL, an
    engine started with ``launch`` (its log in the run directory), or ``virtual`` (checked already); the plan
    then has the URL of the server cardgen started, and what it is."""
    plan = cfg.plan
    if plan.url:
        yield cfg
    elif launch:
        make_run_dir(plan.run_dir)  # the server's log goes there before the load
        args = shlex.split(engine_args)
        added, chosen = get_adapter(launch).launch_defaults(plan.points, args)
        if chosen and not plan.quiet:
            click.echo(f"cardgen: starting {launch} with {shlex.join(added)} ("
                       + "; ".join(f"{flag} {why}" for flag, why in chosen.items()) + ")", err=True)
        with launched_engine(launch, model, engine_args=[*args, *added], log_path=plan.run_dir / SERVER_LOG) as handle:
            launched = {**handle.launch_info, "chosen": chosen} if chosen else handle.launch_info
            yield replace(cfg, plan=replace(plan, url=handle.url, launch=launched, engine=plan.engine or launch))
    elif virtual is not None:
        make_run_dir(plan.run_dir)  # the server's log goes there before the load
        if not plan.quiet:
            click.echo("cardgen: --real-time: measuring the built-in VIRTUAL GPU server over HTTP. Every figure of this "
                       f"card is MODELLED for {virtual.model} on {virtual.tp}x {virtual.gpu_name}, not measured.",
                       err=True)
        with running_sim(virtual.argv, log_path=plan.run_dir / SERVER_LOG) as sim:
            yield replace(cfg, plan=replace(plan, url=sim.url, modelled=True, sim=virtual.describe(sim.describe),
                                            engine="cardgen-sim", gpu=virtual.gpu_info()))
    else:
        raise UsageError("no server to measure: give --url or --launch")


def resume_measured(info: RunInfo, config: ResumeConfig, *, api_key: str | None = None) -> None:
    """Continue a run measured over HTTP against the server it measured (or the one ``config`` names), as it was
    built (``config.load.run_saturated`` holds run.json's), then write its card. ``config`` was checked as it
    was parsed (:func:`cardgen.cli.resume.parse_resume`); the run's :class:`RunPlan` is made here, once, from it
    and run.json (its suite expanded once)."""
    run_dir, out = config.run_dir, config.outputs
    url, launch, engine_args = config.url, config.launch, config.engine_args
    virtual = None
    launched = info.server.launch
    if not url and not launch:
        if info.modelled and info.sim is not None:
            virtual = ModelledServer.of_run(info, model_config=config.model_config_path)
            virtual.check()
        elif launched is not None and launched.engine:
            launch = launched.engine
            args = list(launched.engine_args)
            if any(MASK in a for a in args):
                raise UsageError(f"the run started {launch} with a secret among its arguments (not saved): give "
                                 f"--launch {launch} --engine-args '...' again")
            engine_args = shlex.join(args)
        else:
            url = info.server.url  # the base URL the run measured, as it wrote it
    suite = suite_of(info)
    plan = RunPlan(model=info.model, suite=suite, points=tuple(expand(suite)), run_dir=run_dir, load=config.load,
                   quiet=out.quiet, url=url or "", engine=config.engine, argv=tuple(sys.argv))
    cfg = LoadConfig(plan=plan, api_key=api_key)
    planning = nullcontext() if virtual is None else plan_in_background(
        suite, model=virtual.model, gpu=virtual.gpu, tp=virtual.tp, model_config=virtual.model_config,
        modelled=True, gpu_given=True, done=[o.name for o in info.points if o.ended], engine=virtual.engine)
    started_with = launched.arguments.get("model") if launched is not None else None  # a GGUF's path, say
    with planning as time_plan, measured_server(replace(cfg, time_plan=time_plan), model=str(started_with or info.model),
                                                launch=launch, engine_args=engine_args, virtual=virtual) as cfg:
        prepared = prepare_resume(cfg, info)
        finish(prepared, execute(prepared))
    if not out.no_card:
        render_card(run_dir, quiet=out.quiet)
    click.echo(str(run_dir))
