# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which patches the standard library for gevent)
"""A load over HTTP: ``cardgen build`` against a server at ``--url``, one started with ``--launch``, or the
virtual server on loopback (``--real-time``), measured in real time by the load engine; and ``cardgen resume``
of such a run. Imports Locust before anything else."""

from __future__ import annotations

from cardgen.load.stage import LoadConfig, execute, finish, run_load  # first: Locust patches ssl for gevent

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cardgen.buildconfig import BuildConfig, LaunchTarget, ResumeConfig, UrlTarget, VirtualTarget
from cardgen.cli.options import check_server_options
from cardgen.cli.planning import plan_in_background
from cardgen.cli.price import price_for, record_price
from cardgen.cli.render import render_card
from cardgen.engines.launch import launched_engine
from cardgen.engines.lora import LoraModule, check_served
from cardgen.engines.registry import ENGINES, engine_name, get_adapter
from cardgen.errors import UsageError
from cardgen.load.resume import prepare_resume
from cardgen.numbers import duration_text
from cardgen.points import expand, suite_adapters
from cardgen.redact import MASK
from cardgen.rundir import SERVER_LOG, check_run_dir, default_run_dir, make_run_dir, run_dirs
from cardgen.runinfo import load_seconds
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
    (:mod:`cardgen.calibrated`). ``api_key``: the server's bearer token (no part of the config: never saved)."""
    target = config.target
    if isinstance(target, LaunchTarget) and target.lora_modules:
        check_served([LoraModule.parse(spec) for spec in target.lora_modules],
                     suite_adapters(expand(config.parsed_suite)))
    if not isinstance(target, VirtualTarget):
        if len(target.gpus) > 1:
            raise UsageError("several --gpu write one modelled run each: a measured server has one GPU type")
        adapter, profile = engine_choice(target.engine)
        measure(config, api_key=api_key, run_dir=config.outputs.out_dir, gpu=target.gpus[0], engine=adapter,
                profile=profile)
        return
    servers = [ModelledServer.of_build(config, gpu=g) for g in target.gpus]
    for server in servers:
        server.check()
    out = config.outputs
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


def measure(config: BuildConfig, *, api_key: str | None, run_dir: Path | None, gpu: str, engine: str | None,
            profile: str, virtual: ModelledServer | None = None) -> None:
    """Measure one server of ``config`` over HTTP with the load engine, in real time, into ``run_dir`` (None: a
    new one under the runs root): the one at its URL, one started with its ``launch``, or the virtual server
    ``virtual`` on loopback, on ``gpu``; ``engine`` forces the adapter, ``profile`` is the engine profile of its
    cost plan. Then write the card. With a ``calibrate_tolerance``, a calibrated run (:func:`measure_calibrated`)."""
    target, load, out = config.target, config.load, config.outputs
    url = target.url if isinstance(target, UrlTarget) else None
    launch = target.launch if isinstance(target, LaunchTarget) else None
    count = check_server_options(url=url, launch=launch, gpu_metrics_url=load.gpu_metrics_url,
                                 workers="0" if load.workers is None else load.workers,
                                 scrape_interval=load.scrape_interval_s)
    name = model_name(config.model)
    run_dir = run_dir or default_run_dir(name, root=out.runs_root)
    check_run_dir(run_dir)  # before any server starts; missing parents are created with the run directory
    cfg = LoadConfig(url=url or "", model=name, suite=config.parsed_suite, run_dir=run_dir, api_key=api_key,
                     workers=count, remote_workers=load.remote_workers, master_bind_host=load.master_bind,
                     master_port=load.master_port, scrape_interval_s=load.scrape_interval_s, quiet=out.quiet,
                     engine=engine, gpu_metrics_url=load.gpu_metrics_url, run_saturated=load.run_saturated,
                     gpu={"name": gpu, "name_source": "as given with --gpu"} if target.gpu_given and virtual is None
                     else {}, build=config)
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
                                gpu_given=target.gpu_given, engine=profile) as plan:
            with measured_server(replace(cfg, plan=plan), model=config.model, launch=launch,
                                 engine_args=engine_args, virtual=virtual) as cfg:
                result = run_load(cfg)
            planned, late = plan.after_load() if plan is not None else (None, False)
        if planned is not None and not out.quiet:
            if late:  # the load ended before the planner: the plan's line, once, before the comparison
                click.echo(planned.line, err=True)
            click.echo(f"cardgen: the load took {duration_text(load_seconds(result.info) * target.tp)} of GPU time "
                       f"(planned ~{duration_text(planned.gpu_time_s)})", err=True)
    record_price(run_dir, price_for(config.price_per_hour, gpu))
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


def resume_measured(info: RunInfo, config: ResumeConfig, *, api_key: str | None = None) -> None:
    """Continue a run measured over HTTP against the server it measured (or the one ``config`` names), as it was
    built (``config.load.run_saturated`` holds run.json's), then write its card."""
    run_dir, load, out = config.run_dir, config.load, config.outputs
    url, launch, engine_args = config.url, config.launch, config.engine_args
    count = check_server_options(url=url, launch=launch, gpu_metrics_url=load.gpu_metrics_url,
                                 workers=info.workers if load.workers is None else load.workers,
                                 scrape_interval=load.scrape_interval_s)
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
            url = info.server.url
    cfg = LoadConfig(url=url or "", model=info.model, suite=suite_of(info), run_dir=run_dir, api_key=api_key,
                     workers=count, remote_workers=load.remote_workers, master_bind_host=load.master_bind,
                     master_port=load.master_port, scrape_interval_s=load.scrape_interval_s, quiet=out.quiet,
                     engine=config.engine, gpu_metrics_url=load.gpu_metrics_url, run_saturated=load.run_saturated)
    planning = nullcontext() if virtual is None else plan_in_background(
        cfg.suite, model=virtual.model, gpu=virtual.gpu, tp=virtual.tp, model_config=virtual.model_config,
        modelled=True, gpu_given=True, done=[o.name for o in info.points if o.ended], engine=virtual.engine)
    started_with = launched.arguments.get("model") if launched is not None else None  # a GGUF's path, say
    with planning as plan, measured_server(replace(cfg, plan=plan), model=str(started_with or info.model),
                                           launch=launch, engine_args=engine_args, virtual=virtual) as cfg:
        prepared = prepare_resume(cfg, info)
        finish(prepared, execute(prepared))
    if not out.no_card:
        render_card(run_dir, quiet=out.quiet)
    click.echo(str(run_dir))
