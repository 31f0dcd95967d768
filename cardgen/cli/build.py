"""``cardgen build MODEL``: measure a server (given by --url, launched with --launch, or the built-in virtual
GPU server over HTTP with --real-time) with a suite, or model one in virtual time, then render the card.

Which path runs is decided before anything that imports ``ssl``: a load over HTTP (:mod:`cardgen.cli.measure`)
must import Locust first, which patches the standard library for gevent; a modelled run
(:mod:`cardgen.cli.model`) never imports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import click
from click.core import ParameterSource

from cardgen.buildconfig import (
    BuildConfig,
    LaunchTarget,
    Outputs,
    ServedOptions,
    SuiteChoice,
    UrlTarget,
    VirtualTarget,
)
from cardgen.cli.options import (
    REAL_TIME_OPTIONS,
    check_server_options,
    parse_gpus,
    parse_load,
    server_options,
)
from cardgen.cli.price import PRICE_OPTION, check_price
from cardgen.cli.served import NAMES as SERVED_OPTIONS
from cardgen.cli.served import served_model_options
from cardgen.errors import UsageError
from cardgen.points import suite_adapters
from cardgen.sim.served import ServedModel
from cardgen.suite import load_suite


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
@click.option("--lora-module", "lora_modules", multiple=True, metavar="NAME=PATH",
              help="With --launch: serve this LoRA adapter (a PEFT directory) under NAME, the model name the suite's "
                   "requests ask for (repeat for each adapter).")
@server_options(workers_default=0)
@served_model_options(adapters=False)
@PRICE_OPTION
@click.option("--calibrate", is_flag=True, help="Measure only what identifies the server, fit the virtual server to it, "
              "predict the rest of the suite and measure spot checks of the prediction (a calibrated card: every "
              "point says whether it was measured or predicted). Needs the model's architecture (a preset name or "
              "--model-config); --gpu and --engine say where the fit starts.")
@click.option("--calibrate-tolerance", type=float, default=0.05, show_default=True,
              help="With --calibrate: a spot check that misses its prediction by more than this fraction on any "
                   "figure has its prompt / output pair measured point by point instead.")
@click.pass_context
def build(ctx: click.Context, /, **params: Any) -> None:
    """Measure MODEL's server and write its card into a run directory; without a server, model one."""
    run_build(parse_build(ctx), api_key=params["api_key"])


def parse_build(ctx: click.Context) -> BuildConfig:
    """``build``'s options as one :class:`BuildConfig`, each checked here, once (nothing after checks them again:
    the config holds the server's base URL and the count of workers as parsed, and the suite's points, expanded
    once); a one-line UsageError for options that do not go together or cannot work (those that need the
    server's own modules, which import ``ssl``, are checked where the load begins:
    :func:`cardgen.cli.measure.build_measured`, which also checks the run directory; the server options are
    checked here, before the load engine is imported). The API key is no part of it."""
    p = ctx.params
    url, launch, real_time, calibrate = p["url"], p["launch"], p["real_time"], p["calibrate"]
    check_price(p["price_per_hour"])
    suite = SuiteChoice(name=p["suite_name"], spec=load_suite(p["suite_name"]))
    given = {name for name in p if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)}
    gpus = parse_gpus(p["gpu"])
    modelled_only = sorted(given & set(SERVED_OPTIONS))
    if (url or launch) and modelled_only:
        raise UsageError(f"--{modelled_only[0].replace('_', '-')} describes the virtual server's model: against a "
                         "real server, give the engine its own flags (--engine-args)")
    if p["lora_modules"] and not launch:
        raise UsageError("--lora-module serves an adapter from an engine cardgen starts: give --launch (a server at "
                         "--url serves its own)")
    served = ServedOptions(**{name: p[name] for name in SERVED_OPTIONS})
    if not (url or launch):  # the flags that do not go together fail now, before anything runs
        ServedModel.of_options(**served.model_dump(), adapters=suite_adapters(list(suite.points)))
    if "calibrate_tolerance" in given and not calibrate:
        raise UsageError("--calibrate-tolerance applies to --calibrate: add --calibrate, or drop it")
    if calibrate and not (url or launch or real_time):
        raise UsageError("--calibrate measures a server and predicts the rest of the suite from it: give --url, "
                         "--launch, or --real-time (the virtual server over HTTP)")
    if calibrate and p["run_saturated"]:
        raise UsageError("--calibrate predicts the points a saturated server would skip as skipped: drop "
                         "--run-saturated")
    if not (url or launch or real_time):
        real_only = sorted(given & REAL_TIME_OPTIONS)
        if real_only:
            raise UsageError(f"--{real_only[0].replace('_', '-')} applies to a load against a server: give --url, "
                             "--launch, or --real-time to measure the virtual server over HTTP")
    workers: int | Literal["auto"] = 0
    if url or launch or real_time:  # before the load engine is imported: bad input is said at once
        url, workers = check_server_options(url=url, launch=launch, gpu_metrics_url=p["gpu_metrics_url"],
                                            workers=p["workers"], scrape_interval=p["scrape_interval"],
                                            remote_workers=p["remote_workers"])
    server = dict(engine=p["engine"], gpus=tuple(gpus), gpu_given="gpu" in given, tp=p["tp"],
                  model_config_path=p["model_config"])
    if (url or launch) and real_time:
        raise UsageError("--real-time is for the virtual server: a server at --url or --launch is measured in "
                         "real time already")
    target: UrlTarget | LaunchTarget | VirtualTarget
    if url:
        target = UrlTarget(url=url, **server)
    elif launch:
        target = LaunchTarget(launch=launch, engine_args=p["engine_args"], lora_modules=p["lora_modules"], **server)
    else:
        target = VirtualTarget(real_time=real_time, served=served, **server)
    return BuildConfig(
        model=p["model"], suite=suite, target=target, load=parse_load(p, workers=workers),
        outputs=Outputs(out_dir=p["out_dir"], runs_root=p["runs_root"], no_card=p["no_card"], quiet=p["quiet"]),
        price_per_hour=p["price_per_hour"], calibrate_tolerance=p["calibrate_tolerance"] if calibrate else None)


def run_build(config: BuildConfig, *, api_key: str | None = None) -> None:
    """The build ``config`` says: a load over HTTP, or a modelled run; then the card. ``api_key``: the server's
    bearer token, never part of the config (nor of anything written)."""
    if config.over_http:
        from cardgen.cli import measure  # noqa: PLC0415  Locust patches ssl: a load over HTTP imports it before all else

        measure.build_measured(config, api_key=api_key)
        return
    from cardgen.cli import model as modelled  # noqa: PLC0415  it imports ssl: chosen after the path, for Locust's sake

    modelled.build_modelled(config)
