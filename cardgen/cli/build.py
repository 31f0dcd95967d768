"""``cardgen build MODEL``: measure a server (given by --url, launched with --launch, or the built-in virtual
GPU server) with a suite, then render the card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from cardgen.errors import UsageError

if TYPE_CHECKING:
    from cardgen.load.progress import PlannedTime
    from cardgen.load.stage import LoadConfig
    from cardgen.schemas.run import RunInfo
    from cardgen.suite import Suite

F = TypeVar("F", bound=Callable[..., Any])


def server_options(*, workers_default: int | None) -> Callable[[F], F]:
    """The options that say how to reach the server and run the load: the same for ``build`` and ``resume``."""
    options = [
        click.option("--url", help="Base URL of a running OpenAI-compatible server (e.g. http://127.0.0.1:8000)."),
        click.option("--api-key", envvar="CARDGEN_API_KEY", help="Bearer token for the server (or CARDGEN_API_KEY)."),
        click.option("--workers", type=int, default=workers_default, show_default=workers_default is not None,
                     help="Locust worker processes (0 = one process). Spread load when the client is the "
                          "bottleneck." + ("" if workers_default is not None else " [default: as the run did]")),
        click.option("--remote-workers", is_flag=True, help="Wait for --workers started on other machines "
                     "(`cardgen worker --master-host THIS_HOST`) instead of starting them here."),
        click.option("--master-bind", default="127.0.0.1", show_default=True,
                     help="Address the Locust master binds."),
        click.option("--master-port", type=int, default=0, help="Port the Locust master binds (0 = any free port)."),
        click.option("--engine", help="Force the engine (vllm, sglang, tgi, llamacpp, openai) instead of "
                     "detecting it."),
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


def check_server_options(*, url: str | None, launch: str | None, gpu_metrics_url: str | None, workers: int,
                         scrape_interval: float) -> None:
    """One-line errors for options that cannot work, before any server starts."""
    from cardgen.load.stage import check_url  # first: monkey-patches for gevent

    if url and launch:
        raise UsageError("give either --url (a running server) or --launch (start one), not both")
    if url:
        check_url(url)
    if gpu_metrics_url:
        check_url(gpu_metrics_url)
    if workers < 0:
        raise UsageError("--workers must be 0 or more")
    if scrape_interval < 0.1:
        raise UsageError("--scrape-interval must be at least 0.1 s: scraping faster loads the server you measure")


@click.command("build")
@click.argument("model")
@click.option("--suite", "suite_name", default="standard", show_default=True,
              help="quick | standard | full | a suite .yaml file.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Run directory [runs/<model>/<UTC time>/].")
@click.option("--runs-root", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Where default run directories go.")
@click.option("--gpu", default="A100-80GB", show_default=True,
              help="Virtual server: the modelled GPU, a preset or a .yaml file (memory_gb, bandwidth_gb_s, "
                   "peak_tflops). With a real server: its GPU, for the cost plan.")
@click.option("--model-config", type=click.Path(path_type=Path), help="Virtual server: a Hugging Face config.json.")
@click.option("--tp", type=int, default=1, show_default=True, help="Virtual server: tensor-parallel GPUs (with a real server: for the cost plan).")
@server_options(workers_default=0)
@click.pass_context
def build(ctx: click.Context, model: str, url: str | None, suite_name: str, out_dir: Path | None, runs_root: Path,
          api_key: str | None, workers: int, remote_workers: bool, master_bind: str, master_port: int,
          engine: str | None, launch: str | None, engine_args: str, gpu: str, model_config: Path | None, tp: int,
          gpu_metrics_url: str | None, scrape_interval: float, run_saturated: bool, no_card: bool,
          quiet: bool) -> None:
    """Measure MODEL's server and write its card into a run directory."""
    from cardgen.load.stage import LoadConfig, check_run_dir, run_load  # first: monkey-patches for gevent
    from cardgen.rundir import default_run_dir
    from cardgen.suite import load_suite

    suite = load_suite(suite_name)
    check_server_options(url=url, launch=launch, gpu_metrics_url=gpu_metrics_url, workers=workers,
                         scrape_interval=scrape_interval)
    virtual = None if url or launch else VirtualServer(model=model, gpu=gpu, tp=tp, model_config=model_config)
    if virtual is not None:
        virtual.check()
    run_dir = out_dir or default_run_dir(model, root=runs_root)
    check_run_dir(run_dir)  # before any server starts; missing parents are created with the run directory
    gpu_given = ctx.get_parameter_source("gpu") not in (ParameterSource.DEFAULT, None)
    with plan_in_background(suite_name, model=model, gpu=gpu, tp=tp, model_config=model_config,
                            modelled=virtual is not None, gpu_given=gpu_given) as plan:
        cfg = LoadConfig(url=url or "", model=model, suite=suite, run_dir=run_dir, api_key=api_key,
                         workers=workers, remote_workers=remote_workers, master_bind_host=master_bind,
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


@dataclass(frozen=True, kw_only=True)
class VirtualServer:
    """The built-in virtual GPU server: what ``cardgen build`` measures when it is given no server, and what
    ``cardgen resume`` starts again for a run that measured it."""

    model: str
    gpu: str
    tp: int = 1
    model_config: Path | None = None

    def check(self) -> None:
        """A one-line UsageError, before any process starts, for an unknown model or GPU or a missing config."""
        from cardgen.sim.roofline import build_perf_model

        if self.model_config is not None and not self.model_config.is_file():
            raise UsageError(f"--model-config {self.model_config} does not exist")
        if self.tp < 1:
            raise UsageError("--tp must be 1 or more")
        build_perf_model(model=None if self.model_config else self.model, model_config=self.model_config,
                         gpu=self.gpu, tp=self.tp)

    @property
    def argv(self) -> list[str]:
        """``cardgen serve-sim``'s arguments for this server, without its address."""
        argv = [self.model, "--gpu", self.gpu, "--tp", str(self.tp)]
        if self.model_config is not None:
            argv += ["--model-config", str(self.model_config)]
        return argv

    def describe(self, described: Mapping[str, Any]) -> dict[str, Any]:
        """run.json's ``sim``: the running server's own description, and how to start it again."""
        sim = dict(described)
        if self.model_config is not None:
            sim["model_config"] = str(self.model_config.resolve())
        return sim

    @classmethod
    def of_run(cls, info: RunInfo, *, model_config: Path | None = None) -> VirtualServer:
        """The virtual server a modelled run measured, from run.json's ``sim`` (``model_config`` replaces the
        one it names)."""
        sim = info.sim or {}
        gpu, tp, config = sim.get("gpu"), sim.get("tp", 1), model_config or sim.get("model_config")
        if not isinstance(gpu, str) or not isinstance(tp, int):
            raise UsageError("run.json does not say which virtual server the run measured (its 'sim' names no GPU): "
                             "give --url of a server to resume against")
        return cls(model=str(sim.get("model") or info.model), gpu=gpu, tp=tp,
                   model_config=Path(config) if config else None)


@contextmanager
def measured_server(cfg: LoadConfig, *, model: str, launch: str | None, engine_args: str,
                    virtual: VirtualServer | None) -> Iterator[LoadConfig]:
    """``cfg`` pointed at the server to measure, which runs while the block does: the one at ``cfg.url``, an
    engine started with ``launch`` (its log in the run directory), or ``virtual`` (checked already)."""
    from cardgen.load.stage import make_run_dir
    from cardgen.rundir import SERVER_LOG

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
            click.echo("cardgen: no --url: measuring the built-in VIRTUAL GPU server. Every figure of this card is "
                       f"MODELLED for {virtual.model} on {virtual.tp}x {virtual.gpu}, not measured.", err=True)
        with running_sim(virtual.argv, log_path=cfg.run_dir / SERVER_LOG) as sim:
            yield replace(cfg, url=sim.url, modelled=True, sim=virtual.describe(sim.describe), engine="cardgen-sim",
                          gpu={"name": virtual.gpu, "count": virtual.tp, "modelled": True})
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
                       modelled: bool, gpu_given: bool, done: Collection[str] = ()) -> Iterator[BackgroundPlan | None]:
    """The cost plan of the run while the block runs, when the model and GPU are known: always for the virtual
    server; for a real one only when the virtual server knows the model (a preset, or --model-config) and
    --gpu was given. None otherwise: nothing is said about a cost cardgen cannot model."""
    if not modelled:
        from cardgen.sim.catalog import read_data, resolve

        if not gpu_given or (model_config is None and resolve(model, read_data("models.yaml")) is None):
            yield None
            return
    argv = [model, "--gpu", gpu, "--tp", str(tp)]
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
