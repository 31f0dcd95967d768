"""``cardgen build MODEL``: measure a server (given by --url, launched with --launch, or the built-in virtual
GPU server) with a suite, then render the card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from cardgen.errors import UsageError

if TYPE_CHECKING:
    from cardgen.load.progress import PlannedTime
    from cardgen.load.stage import LoadConfig
    from cardgen.schemas.run import RunInfo
    from cardgen.sim.modelled import ModelledServer
    from cardgen.suite import Suite

F = TypeVar("F", bound=Callable[..., Any])


def server_options(*, workers_default: int | None) -> Callable[[F], F]:
    """The options that say how to reach the server and run the load: the same for ``build`` and ``resume``."""
    options = [
        click.option("--url", help="Base URL of a running OpenAI-compatible server (e.g. http://127.0.0.1:8000)."),
        click.option("--api-key", envvar="CARDGEN_API_KEY", help="Bearer token for the server (or CARDGEN_API_KEY)."),
        click.option("--workers", default=None if workers_default is None else str(workers_default),
                     show_default=workers_default is not None, metavar="N|auto",
                     help="Locust worker processes (0 = one process; auto = as many as the busiest point needs, "
                          "up to the cores). Spread load when the client is the bottleneck."
                          + ("" if workers_default is not None else " [default: as the run did]")),
        click.option("--remote-workers", is_flag=True, help="Wait for --workers started on other machines "
                     "(`cardgen worker --master-host THIS_HOST`) instead of starting them here."),
        click.option("--master-bind", default="127.0.0.1", show_default=True,
                     help="Address the Locust master binds."),
        click.option("--master-port", type=int, default=0, help="Port the Locust master binds (0 = any free port)."),
        click.option("--engine", help="With a server: its engine (vllm, sglang, tgi, llamacpp, openai) instead of "
                     "detecting it, or an engine profile (vllm-0.6 ...) that also sets its cost plan's. Without: the "
                     "virtual server's engine profile (vllm, vllm-0.6, vllm-0.4, sglang, tgi; default vllm)."),
        click.option("--launch", type=click.Choice(["vllm", "sglang", "tgi", "llamacpp"]),
                     help="Start this engine on loopback, measure it, stop it."),
        click.option("--engine-args", default="", help="Extra arguments for --launch, as one string."),
        click.option("--gpu-metrics-url", help="A DCGM exporter's /metrics URL, for GPU telemetry when the server "
                     "is on another host (a local server's GPUs are read through NVML)."),
        click.option("--scrape-interval", type=float, default=0.5, show_default=True,
                     help="Seconds between /metrics scrapes (at least 0.1)."),
        click.option("--run-saturated", is_flag=True, help="Run every parallel count, also those larger than "
                     "one that saturated the server (skipped by default)."),
        click.option("--no-card", is_flag=True, help="Measure only: write the raw files, not the card."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def parse_workers(value: int | str) -> int | str:
    """``--workers``: a count of processes, or ``auto``; a one-line UsageError otherwise."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        workers = int(text)
    except ValueError:
        raise UsageError(f"--workers must be a number of processes or auto, not {value!r}") from None
    if workers < 0:
        raise UsageError("--workers must be 0 or more")
    return workers


def check_server_options(*, url: str | None, launch: str | None, gpu_metrics_url: str | None, workers: int | str,
                         scrape_interval: float) -> int | str:
    """One-line errors for options that cannot work, before any server starts; the parsed ``--workers``."""
    from cardgen.load.stage import check_url  # first: monkey-patches for gevent

    if url and launch:
        raise UsageError("give either --url (a running server) or --launch (start one), not both")
    if url:
        check_url(url)
    if gpu_metrics_url:
        check_url(gpu_metrics_url)
    if scrape_interval < 0.1:
        raise UsageError("--scrape-interval must be at least 0.1 s: scraping faster loads the server you measure")
    return parse_workers(workers)


@click.command("build")
@click.argument("model")
@click.option("--suite", "suite_name", default="standard", show_default=True,
              help="quick | standard | full | a suite .yaml file.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Run directory [runs/<model>/<UTC time>/]; with several --gpu, one folder per GPU inside it.")
@click.option("--runs-root", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Where default run directories go.")
@click.option("--gpu", default="A100-80GB", show_default=True,
              help="Virtual server: the modelled GPU, a preset or a .yaml file (memory_gb, bandwidth_gb_s, "
                   "peak_tflops); several, comma-separated, write one run each. With a real server: its GPU, for "
                   "the cost plan.")
@click.option("--model-config", type=click.Path(path_type=Path), help="Virtual server: a Hugging Face config.json.")
@click.option("--tp", type=int, default=1, show_default=True, help="Virtual server: tensor-parallel GPUs (with a real server: for the cost plan).")
@click.option("--real-time", is_flag=True, help="Virtual server: serve it on loopback and measure it over HTTP with "
              "the load engine, in real time (for testing a client or the load path), instead of computing its "
              "run in virtual time.")
@server_options(workers_default=0)
@click.pass_context
def build(ctx: click.Context, model: str, url: str | None, suite_name: str, out_dir: Path | None, runs_root: Path,
          api_key: str | None, workers: str, remote_workers: bool, master_bind: str, master_port: int,
          engine: str | None, launch: str | None, engine_args: str, gpu: str, model_config: Path | None, tp: int,
          real_time: bool, gpu_metrics_url: str | None, scrape_interval: float, run_saturated: bool, no_card: bool,
          quiet: bool) -> None:
    """Measure MODEL's server and write its card into a run directory; without a server, model one."""
    from cardgen.suite import load_suite

    suite = load_suite(suite_name)
    given = {name for name in ctx.params if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)}
    gpus = parse_gpus(gpu)
    if url or launch:
        if len(gpus) > 1:
            raise UsageError("several --gpu write one modelled run each: a measured server has one GPU type")
        if real_time:
            raise UsageError("--real-time is for the virtual server: a server at --url or --launch is measured in "
                             "real time already")
        adapter, profile = engine_choice(engine)
        measure(model, url=url, launch=launch, suite_name=suite_name, suite=suite, out_dir=out_dir,
                runs_root=runs_root, api_key=api_key, workers=workers, remote_workers=remote_workers,
                master_bind=master_bind, master_port=master_port, engine=adapter, engine_args=engine_args,
                gpu=gpus[0], model_config=model_config, tp=tp, profile=profile, gpu_given="gpu" in given,
                gpu_metrics_url=gpu_metrics_url, scrape_interval=scrape_interval, run_saturated=run_saturated,
                no_card=no_card, quiet=quiet)
        return
    from cardgen.sim.modelled import ModelledServer

    servers = [ModelledServer(model=model, gpu=g, tp=tp, model_config=model_config, engine=engine or "vllm")
               for g in gpus]
    for server in servers:
        server.check()
    dirs = run_dirs(model, gpus, out_dir=out_dir, runs_root=runs_root)
    if not real_time:
        real_only = sorted(given & REAL_TIME_OPTIONS)
        if real_only:
            raise UsageError(f"--{real_only[0].replace('_', '-')} applies to a load against a server: give --url, "
                             "--launch, or --real-time to measure the virtual server over HTTP")
        for server, run_dir in zip(servers, dirs, strict=True):
            model_in_virtual_time(server, suite, run_dir, run_saturated=run_saturated, no_card=no_card,
                                  quiet=quiet)
        return
    for server, run_dir in zip(servers, dirs, strict=True):
        measure(model, url=None, launch=None, suite_name=suite_name, suite=suite, out_dir=run_dir,
                runs_root=runs_root, api_key=api_key, workers=workers, remote_workers=remote_workers,
                master_bind=master_bind, master_port=master_port, engine=None, engine_args=engine_args,
                gpu=server.gpu, model_config=model_config, tp=tp, profile=server.engine, gpu_given=True,
                gpu_metrics_url=gpu_metrics_url, scrape_interval=scrape_interval, run_saturated=run_saturated,
                no_card=no_card, quiet=quiet, virtual=server)


#: options that only a load against a server (real, or the virtual one with --real-time) uses
REAL_TIME_OPTIONS = frozenset({"url", "api_key", "workers", "remote_workers", "master_bind", "master_port",
                               "engine_args", "gpu_metrics_url", "scrape_interval"})


def parse_gpus(gpu: str) -> list[str]:
    """``--gpu``: one GPU, or several comma-separated (each a preset or a GPU file)."""
    gpus = [g.strip() for g in gpu.split(",")]
    if not all(gpus):
        raise UsageError(f"--gpu {gpu!r} names an empty GPU: give presets or files separated by commas")
    if len(set(gpus)) < len(gpus):
        raise UsageError(f"--gpu {gpu!r} names a GPU twice")
    return gpus


def engine_choice(engine: str | None) -> tuple[str | None, str]:
    """``--engine`` against a real server: the adapter it forces (None: detect), and the engine profile its cost
    plan models. An adapter name (vllm, sglang, tgi, llamacpp, openai) or a profile name (vllm-0.6 forces the
    vllm adapter and plans with the 0.6 profile); anything else is a one-line UsageError."""
    if engine is None:
        return None, "vllm"
    from cardgen.engines.registry import ENGINES, engine_name
    from cardgen.sim.roofline import list_engines

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
    from cardgen.sim.roofline import list_engines

    return adapter if adapter in list_engines() else "vllm"


def run_dirs(model: str, gpus: Sequence[str], *, out_dir: Path | None, runs_root: Path) -> list[Path]:
    """One run directory per GPU: ``--out`` (one folder per GPU inside it when there are several), or
    ``runs/<model>/<UTC time>[-<gpu>]/``; a one-line UsageError when one holds a run already."""
    from cardgen.rundir import check_run_dir, default_run_dir, slugify

    if len(gpus) == 1:
        dirs = [out_dir or default_run_dir(model, root=runs_root)]
    elif out_dir is not None:
        dirs = [out_dir / slugify(Path(g).stem if g.endswith((".yaml", ".yml")) else g) for g in gpus]
    else:
        base = default_run_dir(model, root=runs_root)
        dirs = [base.with_name(f"{base.name}-{slugify(Path(g).stem if g.endswith(('.yaml', '.yml')) else g)}")
                for g in gpus]
    for run_dir in dirs:
        check_run_dir(run_dir)
    return dirs


def model_in_virtual_time(server: ModelledServer, suite: Suite, run_dir: Path, *, run_saturated: bool,
                          no_card: bool, quiet: bool) -> None:
    """The suite's run on ``server`` computed in virtual time, its run directory and card."""
    import time

    from cardgen.plan import duration_text
    from cardgen.rundir import make_run_dir
    from cardgen.sim.modelled import modelled_run

    if not quiet:
        click.echo(f"cardgen: no --url: MODELLING {server.model} on {server.tp}x {server.gpu_name} ({server.engine} "
                   "profile) in virtual time. Every figure of this card is MODELLED, not measured.", err=True)
    make_run_dir(run_dir)
    began = time.time()
    info = modelled_run(server, suite, run_dir, argv=sys.argv, started_unix=began, run_saturated=run_saturated)
    if not quiet:
        skipped = sum(1 for p in info.points if p.stop == "skipped")
        click.echo(f"cardgen: {len(info.points) - skipped} points, {info.requests_total} requests"
                   + (f" ({skipped} points skipped at saturation)" if skipped else "")
                   + f", computed in {time.time() - began:.1f} s; on a real server the suite would take "
                   f"~{duration_text(load_seconds(info) * server.tp)} of GPU time (modelled)", err=True)
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def measure(model: str, *, url: str | None, launch: str | None, suite_name: str, suite: Suite,
            out_dir: Path | None, runs_root: Path, api_key: str | None, workers: str, remote_workers: bool,
            master_bind: str, master_port: int, engine: str | None, engine_args: str, gpu: str,
            model_config: Path | None, tp: int, profile: str, gpu_given: bool, gpu_metrics_url: str | None,
            scrape_interval: float, run_saturated: bool, no_card: bool, quiet: bool,
            virtual: ModelledServer | None = None) -> None:
    """Measure a server over HTTP with the load engine, in real time: the one at ``url``, one started with
    ``launch``, or the virtual server ``virtual`` on loopback; then write the card."""
    from cardgen.load.stage import LoadConfig, run_load  # first: monkey-patches for gevent
    from cardgen.rundir import check_run_dir, default_run_dir

    count = check_server_options(url=url, launch=launch, gpu_metrics_url=gpu_metrics_url, workers=workers,
                                 scrape_interval=scrape_interval)
    run_dir = out_dir or default_run_dir(model, root=runs_root)
    check_run_dir(run_dir)  # before any server starts; missing parents are created with the run directory
    with plan_in_background(suite_name, model=model, gpu=gpu, tp=tp, model_config=model_config,
                            modelled=virtual is not None, gpu_given=gpu_given, engine=profile) as plan:
        cfg = LoadConfig(url=url or "", model=model, suite=suite, run_dir=run_dir, api_key=api_key,
                         workers=count, remote_workers=remote_workers, master_bind_host=master_bind,
                         master_port=master_port, scrape_interval_s=scrape_interval, quiet=quiet, engine=engine,
                         gpu_metrics_url=gpu_metrics_url, plan=plan, run_saturated=run_saturated)
        with measured_server(cfg, model=model, launch=launch, engine_args=engine_args, virtual=virtual) as cfg:
            result = run_load(cfg)
        planned = plan() if plan is not None else None
    if planned is not None and not quiet:
        from cardgen.plan import duration_text

        click.echo(f"cardgen: the load took {duration_text(load_seconds(result.info) * tp)} of GPU time (planned "
                   f"~{duration_text(planned.gpu_time_s)})", err=True)
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def load_seconds(info: RunInfo) -> float:
    """The wall time of a run's load as the plan counts it: from the start of its first point to the end of
    its last (the run's own start and end when it did not record its points)."""
    starts = [p.started_unix for p in info.points if p.started_unix is not None]
    ends = [p.ended_unix for p in info.points if p.ended_unix is not None]
    if starts and ends:
        return max(ends) - min(starts)
    return (info.ended_unix or info.started_unix) - info.started_unix


@contextmanager
def measured_server(cfg: LoadConfig, *, model: str, launch: str | None, engine_args: str,
                    virtual: ModelledServer | None) -> Iterator[LoadConfig]:
    """``cfg`` pointed at the server to measure, which runs while the block does: the one at ``cfg.url``, an
    engine started with ``launch`` (its log in the run directory), or ``virtual`` (checked already)."""
    from cardgen.rundir import SERVER_LOG, make_run_dir

    if cfg.url:
        yield cfg
    elif launch:
        from cardgen.engines.launch import launched_engine

        make_run_dir(cfg.run_dir)  # the server's log goes there before the load
        with launched_engine(launch, model, engine_args=engine_args, log_path=cfg.run_dir / SERVER_LOG) as handle:
            yield replace(cfg, url=handle.url, launch=handle.launch_info, engine=cfg.engine or launch)
    elif virtual is not None:
        from cardgen.sim.launch import running_sim

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
            import yaml

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
        from cardgen.load.progress import PlannedTime
        from cardgen.plan import duration_text

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
        from cardgen.sim.catalog import read_data, resolve

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


def render_card(run_dir: Path, *, quiet: bool) -> None:
    try:
        from cardgen.card import render_run
    except ImportError:
        if os.environ.get("CARDGEN_DEBUG"):
            raise
        click.echo("cardgen: the card renderer is not available in this build; raw files only", err=True)
        return
    card = render_run(run_dir)
    if not quiet:
        click.echo(f"cardgen: card written to {card}", err=True)
        click.echo(headline_text(run_dir), err=True)


def headline_text(run_dir: Path) -> str:
    """The three headline figures in one line, from summary.json ('-' where the run could not measure one)."""
    from cardgen.rundir import RunDir

    summary = RunDir(run_dir).load_summary()
    h = summary.headline

    def fmt(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"

    label = "MODELLED" if summary.modelled else "measured"
    return (f"cardgen: {label}: prompt ingestion {fmt(h.prompt_ingestion_tok_s, 'tok/s')}; generation "
            f"{fmt(h.generation_tok_s_at_10_parallel_1024_128, 'tok/s')} per request at 10 parallel (1024 in, "
            f"128 out); KV cache {fmt(h.kv_cache_tokens, 'tokens')}"
            + (f" ({summary.kv_cache_method})" if summary.kv_cache_method else ""))
