"""``cardgen build MODEL``: measure a server (given by --url, launched with --launch, or the built-in virtual
GPU server) with a suite, then render the card."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cardgen.errors import UsageError

if TYPE_CHECKING:
    from cardgen.load.stage import LoadConfig


@click.command("build")
@click.argument("model")
@click.option("--url", help="Base URL of a running OpenAI-compatible server (e.g. http://127.0.0.1:8000).")
@click.option("--suite", "suite_name", default="standard", show_default=True,
              help="quick | standard | full | a suite .yaml file.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Run directory [runs/<model>/<UTC time>/].")
@click.option("--runs-root", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Where default run directories go.")
@click.option("--api-key", envvar="CARDGEN_API_KEY", help="Bearer token for the server (or CARDGEN_API_KEY).")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Locust worker processes (0 = one process). Spread load when the client is the bottleneck.")
@click.option("--remote-workers", is_flag=True, help="Wait for --workers started on other machines "
              "(`cardgen worker --master-host THIS_HOST`) instead of starting them here.")
@click.option("--master-bind", default="127.0.0.1", show_default=True, help="Address the Locust master binds.")
@click.option("--master-port", type=int, default=0, help="Port the Locust master binds (0 = any free port).")
@click.option("--engine", help="Force the engine (vllm, sglang, tgi, llamacpp, openai) instead of detecting it.")
@click.option("--launch", type=click.Choice(["vllm", "sglang", "tgi", "llamacpp"]),
              help="Start this engine on loopback, measure it, stop it.")
@click.option("--engine-args", default="", help="Extra arguments for --launch, as one string.")
@click.option("--gpu", default="A100-80GB", show_default=True, help="Virtual server: the modelled GPU.")
@click.option("--model-config", type=click.Path(path_type=Path), help="Virtual server: a Hugging Face config.json.")
@click.option("--tp", type=int, default=1, show_default=True, help="Virtual server: tensor-parallel GPUs.")
@click.option("--gpu-metrics-url", help="A DCGM exporter's /metrics URL, for GPU telemetry when the server is on "
              "another host (a local server's GPUs are read through NVML).")
@click.option("--scrape-interval", type=float, default=0.5, show_default=True,
              help="Seconds between /metrics scrapes (at least 0.1).")
@click.option("--no-card", is_flag=True, help="Measure only: write the raw files, not the card.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def build(model: str, url: str | None, suite_name: str, out_dir: Path | None, runs_root: Path, api_key: str | None,
          workers: int, remote_workers: bool, master_bind: str, master_port: int, engine: str | None,
          launch: str | None, engine_args: str, gpu: str, model_config: Path | None, tp: int,
          gpu_metrics_url: str | None, scrape_interval: float, no_card: bool, quiet: bool) -> None:
    """Measure MODEL's server and write its card into a run directory."""
    from cardgen.load.stage import (  # first: monkey-patches for gevent
        LoadConfig,
        check_run_dir,
        check_url,
        make_run_dir,
        run_load,
    )
    from cardgen.rundir import SERVER_LOG, default_run_dir
    from cardgen.suite import load_suite

    suite = load_suite(suite_name)
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
    run_dir = out_dir or default_run_dir(model, root=runs_root)
    check_run_dir(run_dir)  # before any server starts; missing parents are created with the run directory
    cfg = LoadConfig(url=url or "", model=model, suite=suite, run_dir=run_dir, api_key=api_key, workers=workers,
                     remote_workers=remote_workers, master_bind_host=master_bind, master_port=master_port,
                     scrape_interval_s=scrape_interval, quiet=quiet, engine=engine, gpu_metrics_url=gpu_metrics_url)

    if url:
        run_load(cfg)
    elif launch:
        from cardgen.engines.launch import launched_engine

        make_run_dir(run_dir)  # the server's log goes there before the load
        with launched_engine(launch, model, engine_args=engine_args, log_path=run_dir / SERVER_LOG) as handle:
            run_load(replace(cfg, url=handle.url, launch=handle.launch_info, engine=cfg.engine or launch))
    else:
        _run_virtual(cfg, model=model, gpu=gpu, model_config=model_config, tp=tp)

    if not no_card:
        _render(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def _run_virtual(cfg: LoadConfig, *, model: str, gpu: str, model_config: Path | None, tp: int) -> None:
    from cardgen.load.stage import make_run_dir, run_load
    from cardgen.rundir import SERVER_LOG
    from cardgen.sim.launch import running_sim
    from cardgen.sim.roofline import build_perf_model

    if model_config is not None and not model_config.is_file():
        raise UsageError(f"--model-config {model_config} does not exist")
    if tp < 1:
        raise UsageError("--tp must be 1 or more")
    # unknown model or GPU: a one-line error before any process starts
    build_perf_model(model=None if model_config else model, model_config=model_config, gpu=gpu, tp=tp)
    argv = [model, "--gpu", gpu, "--tp", str(tp)]
    if model_config is not None:
        argv += ["--model-config", str(model_config)]
    make_run_dir(cfg.run_dir)  # the server's log goes there before the load
    if not cfg.quiet:
        click.echo("cardgen: no --url: measuring the built-in VIRTUAL GPU server. Every figure of this card is "
                   f"MODELLED for {model} on {tp}x {gpu}, not measured.", err=True)
    with running_sim(argv, log_path=cfg.run_dir / SERVER_LOG) as sim:
        run_load(replace(cfg, url=sim.url, modelled=True, sim=sim.describe, engine="cardgen-sim",
                         gpu={"name": gpu, "count": tp, "modelled": True}))


def _render(run_dir: Path, *, quiet: bool) -> None:
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
