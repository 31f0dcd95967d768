"""``cardgen build MODEL``: measure a server (given by --url, launched with --launch, or the built-in virtual
GPU server over HTTP with --real-time) with a suite, or model one in virtual time, then render the card.

Which path runs is decided before anything that imports ``ssl``: a load over HTTP (:mod:`cardgen.cli.measure`)
must import Locust first, which patches the standard library for gevent; a modelled run
(:mod:`cardgen.cli.model`) never imports it."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from cardgen.cli.options import REAL_TIME_OPTIONS, parse_gpus, server_options
from cardgen.cli.price import PRICE_OPTION, check_price
from cardgen.cli.served import NAMES as SERVED_OPTIONS
from cardgen.cli.served import served_model_options
from cardgen.errors import UsageError
from cardgen.points import expand, suite_adapters
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
def build(ctx: click.Context, model: str, url: str | None, suite_name: str, out_dir: Path | None, runs_root: Path,
          api_key: str | None, workers: str, remote_workers: bool, master_bind: str, master_port: int,
          engine: str | None, launch: str | None, engine_args: str, gpu: str, model_config: Path | None, tp: int,
          real_time: bool, gpu_metrics_url: str | None, scrape_interval: float, run_saturated: bool, no_card: bool,
          quiet: bool, lora_modules: tuple[str, ...], reasoning_share: float, spec_tokens: int,
          spec_acceptance: float | None, spec_method: str, lora_rank: int | None, max_loras: int | None,
          host_s_per_token: float, price_per_hour: float | None, calibrate: bool,
          calibrate_tolerance: float) -> None:
    """Measure MODEL's server and write its card into a run directory; without a server, model one."""
    check_price(price_per_hour)
    suite = load_suite(suite_name)
    given = {name for name in ctx.params if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)}
    gpus = parse_gpus(gpu)
    modelled_only = sorted(given & set(SERVED_OPTIONS))
    if (url or launch) and modelled_only:
        raise UsageError(f"--{modelled_only[0].replace('_', '-')} describes the virtual server's model: against a "
                         "real server, give the engine its own flags (--engine-args)")
    if lora_modules and not launch:
        raise UsageError("--lora-module serves an adapter from an engine cardgen starts: give --launch (a server at "
                         "--url serves its own)")
    served = None if (url or launch) else ServedModel.of_options(
        reasoning_share=reasoning_share, spec_tokens=spec_tokens, spec_acceptance=spec_acceptance,
        spec_method=spec_method, adapters=suite_adapters(expand(suite)), lora_rank=lora_rank, max_loras=max_loras,
        host_s_per_token=host_s_per_token)
    if "calibrate_tolerance" in given and not calibrate:
        raise UsageError("--calibrate-tolerance applies to --calibrate: add --calibrate, or drop it")
    if calibrate and not (url or launch or real_time):
        raise UsageError("--calibrate measures a server and predicts the rest of the suite from it: give --url, "
                         "--launch, or --real-time (the virtual server over HTTP)")
    if calibrate and run_saturated:
        raise UsageError("--calibrate predicts the points a saturated server would skip as skipped: drop "
                         "--run-saturated")
    if url or launch or real_time:
        from cardgen.cli import measure  # noqa: PLC0415  Locust patches ssl: a load over HTTP imports it before all else

        measure.build_measured(model, url=url, launch=launch, real_time=real_time, suite_name=suite_name,
                               suite=suite, gpus=gpus, out_dir=out_dir, runs_root=runs_root, api_key=api_key,
                               workers=workers, remote_workers=remote_workers, master_bind=master_bind,
                               master_port=master_port, engine=engine, engine_args=engine_args,
                               model_config=model_config, tp=tp, gpu_given="gpu" in given,
                               gpu_metrics_url=gpu_metrics_url, scrape_interval=scrape_interval,
                               run_saturated=run_saturated, no_card=no_card, quiet=quiet, served=served,
                               lora_modules=lora_modules, price_per_hour=price_per_hour,
                               calibrate=calibrate_tolerance if calibrate else None)
        return
    real_only = sorted(given & REAL_TIME_OPTIONS)
    if real_only:
        raise UsageError(f"--{real_only[0].replace('_', '-')} applies to a load against a server: give --url, "
                         "--launch, or --real-time to measure the virtual server over HTTP")
    from cardgen.cli import model as modelled  # noqa: PLC0415  it imports ssl: chosen after the path, for Locust's sake

    modelled.build_modelled(model, suite=suite, gpus=gpus, out_dir=out_dir, runs_root=runs_root, engine=engine,
                            model_config=model_config, tp=tp, run_saturated=run_saturated, no_card=no_card,
                            quiet=quiet, served=served or ServedModel(), price_per_hour=price_per_hour)


