"""``cardgen plan MODEL --gpu GPU --suite SUITE``: the GPU time a suite will cost, before any server runs."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from cardgen.calibrated.plan import format_calibrated_plan, make_calibrated_plan
from cardgen.errors import UsageError
from cardgen.plan import format_plan, make_plan
from cardgen.sim.modelled import ModelledServer
from cardgen.suite import load_suite


@click.command("plan")
@click.argument("model")
@click.option("--gpu", default="A100-80GB", show_default=True,
              help="The GPU the run will use: a preset or a .yaml file (memory_gb, bandwidth_gb_s, peak_tflops).")
@click.option("--suite", "suite_name", default="standard", show_default=True,
              help="quick | standard | full | a suite .yaml file.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--model-config", type=click.Path(path_type=Path), help="A Hugging Face config.json for MODEL.")
@click.option("--engine", "--engine-profile", "engine", default="vllm", show_default=True,
              help="The virtual server's engine profile (vllm, vllm-0.6, vllm-0.4, sglang, tgi).")
@click.option("--run-saturated", is_flag=True, help="Plan every parallel count, also those larger than one that "
              "saturates the server (as cardgen build --run-saturated runs them).")
@click.option("--price-per-hour", type=float, help="Price of one GPU-hour, for a cost estimate.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (gpu_time_s, points...).")
@click.option("--calibrate", is_flag=True, help="Plan a calibrated run (cardgen build --calibrate): the points it "
              "measures, the wait while it fits and predicts, its GPU time against the suite point by point.")
@click.option("--calibrate-tolerance", type=float, default=0.05, show_default=True,
              help="With --calibrate: the spot checks' tolerance.")
@click.pass_context
def plan(ctx: click.Context, model: str, gpu: str, suite_name: str, tp: int, model_config: Path | None, engine: str,
         run_saturated: bool, price_per_hour: float | None, as_json: bool, calibrate: bool,
         calibrate_tolerance: float) -> None:
    """Predict each point's requests and seconds, and the total GPU time, of SUITE for MODEL on GPU."""

    if price_per_hour is not None and price_per_hour < 0:
        raise UsageError("--price-per-hour must not be negative")
    if ctx.get_parameter_source("calibrate_tolerance") != ParameterSource.DEFAULT and not calibrate:
        raise UsageError("--calibrate-tolerance applies to --calibrate: add --calibrate, or drop it")
    if calibrate and (run_saturated or price_per_hour is not None):
        raise UsageError("--calibrate plans a calibrated run as cardgen build --calibrate makes it: drop "
                         f"--{'run-saturated' if run_saturated else 'price-per-hour'}")
    suite = load_suite(suite_name)
    server = ModelledServer(model=model, gpu=gpu, tp=tp, model_config=model_config, engine=engine)
    server.check()
    if calibrate:
        if not 0 < calibrate_tolerance < 1:
            raise UsageError(f"--calibrate-tolerance must be between 0 and 1 (0.05 is 5 %), not {calibrate_tolerance:g}")
        planned = make_calibrated_plan(suite, server.config(), tolerance=calibrate_tolerance, gpu_name=server.gpu_name)
        click.echo(planned.to_json() if as_json else format_calibrated_plan(planned))
        return
    result = make_plan(suite, server.config(), price_per_hour=price_per_hour, run_saturated=run_saturated)
    click.echo(result.to_json() if as_json else format_plan(result))
