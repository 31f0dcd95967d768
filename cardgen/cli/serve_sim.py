"""``cardgen serve-sim``: run the virtual GPU server on its own."""

from __future__ import annotations

from pathlib import Path

import click

from cardgen.cli.served import served_model_options
from cardgen.sim.config import PERF_KINDS, SimConfig, parse_faults
from cardgen.sim.served import ServedModel
from cardgen.sim.server import SimServer, serve


@click.command(name="serve-sim")
@click.argument("model")
@click.option("--gpu", default="A100-80GB", show_default=True,
              help="Modelled GPU: a preset or a .yaml file (memory_gb, bandwidth_gb_s, peak_tflops).")
@click.option(
    "--model-config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A Hugging Face config.json for a model that is not a preset.",
)
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--engine", default="vllm", show_default=True, help="Engine profile of the roofline model.")
@click.option(
    "--perf",
    type=click.Choice(PERF_KINDS),
    default="roofline",
    show_default=True,
    help="Performance model: the roofline model, or fixed constants (--fixed-json).",
)
@click.option("--fixed-json", help="FixedPerf fields as JSON, e.g. '{\"prefill_tok_s\": 20000}'.")
@click.option("--served-model-name", help="The model id clients send (default: MODEL).")
@click.option(
    "--max-model-len", type=int, help="Longest prompt + output (default: the model's, capped by KV)."
)
@click.option(
    "--chunked-prefill/--no-chunked-prefill",
    default=None,
    help="Mixed prefill/decode steps under a token budget instead of prefill-first steps "
    "(default: as the engine profile does).",
)
@click.option(
    "--eos-rate",
    default=0.004,
    show_default=True,
    help="Chance per output token of a modelled EOS (ignore_eos or min_tokens=max_tokens: none).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the modelled EOS.")
@click.option(
    "--faults", help="Inject faults by arrival index, e.g. http500=7,drop=11,malformed=13,slow_first=17."
)
@click.option(
    "--fault-after-tokens", default=3, show_default=True, help="Tokens sent before a mid-stream fault."
)
@click.option("--slow-first-s", default=1.0, show_default=True, help="Delay of the slow_first fault.")
@click.option("--stall-s", default=60.0, show_default=True, help="How long the stall fault holds a stream.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, help="0: a free port (see --port-file).")
@click.option(
    "--port-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the bound port here once listening.",
)
@click.option("--max-lifetime-s", default=3600.0, show_default=True, help="Stop after this long (0: never).")
@click.option(
    "--watch-parent/--no-watch-parent",
    default=True,
    show_default=True,
    help="Stop when the parent process exits.",
)
@click.option(
    "--stamp-log",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write one JSON line per request with the time each token was written.",
)
@click.option(
    "--fine-sleep-s",
    default=0.0015,
    show_default=True,
    help="This close to a step end, sleep precisely (blocking) instead of on the event loop's 1 ms timer.",
)
@click.option("--no-tokenize", is_flag=True, help="Hide /tokenize and /detokenize (404).")
@click.option("--hide-cache-config", is_flag=True, help="Leave vllm:cache_config_info out of /metrics.")
@click.option("--no-metrics", is_flag=True, help="Hide /metrics (404).")
@served_model_options(adapters=True)
def serve_sim(
    model: str,
    gpu: str,
    model_config: Path | None,
    tp: int,
    engine: str,
    perf: str,
    fixed_json: str | None,
    served_model_name: str | None,
    max_model_len: int | None,
    chunked_prefill: bool | None,
    eos_rate: float,
    seed: int,
    faults: str | None,
    fault_after_tokens: int,
    slow_first_s: float,
    stall_s: float,
    host: str,
    port: int,
    port_file: Path | None,
    max_lifetime_s: float,
    watch_parent: bool,
    stamp_log: Path | None,
    fine_sleep_s: float,
    no_tokenize: bool,
    hide_cache_config: bool,
    no_metrics: bool,
    reasoning_share: float,
    spec_tokens: int,
    spec_acceptance: float | None,
    spec_method: str,
    lora_rank: int | None,
    max_loras: int | None,
    host_s_per_token: float,
    lora_adapters: str,
) -> None:
    """Serve MODEL as vLLM would on GPU, in real time, with every figure MODELLED (no GPU is used)."""

    config = SimConfig(
        model=model,
        gpu=gpu,
        model_config=model_config,
        tp=tp,
        engine=engine,
        perf=perf,
        fixed_json=fixed_json,
        served_model_name=served_model_name,
        max_model_len=max_model_len,
        chunked_prefill=chunked_prefill,
        eos_rate=eos_rate,
        seed=seed,
        faults=parse_faults(
            faults, after_tokens=fault_after_tokens, slow_first_s=slow_first_s, stall_s=stall_s
        ),
        host=host,
        port=port,
        port_file=port_file,
        max_lifetime_s=max_lifetime_s,
        watch_parent=watch_parent,
        stamp_log=stamp_log,
        fine_sleep_s=fine_sleep_s,
        tokenize=not no_tokenize,
        cache_config=not hide_cache_config,
        metrics=not no_metrics,
        served=ServedModel.of_options(
            reasoning_share=reasoning_share, spec_tokens=spec_tokens, spec_acceptance=spec_acceptance,
            spec_method=spec_method, adapters=tuple(a.strip() for a in lora_adapters.split(",") if a.strip()),
            lora_rank=lora_rank, max_loras=max_loras, host_s_per_token=host_s_per_token),
    )

    def ready(server: SimServer) -> None:
        what = (
            f"{model} on {tp}x {gpu}, engine profile {engine}"
            if perf == "roofline"
            else f"{model}, fixed step times"
        )
        limit = f"; stops after {max_lifetime_s:g} s" if max_lifetime_s > 0 else ""
        click.echo(
            f"cardgen-sim: {server.url} : a MODELLED server (virtual GPU, no real inference): {what}{limit}",
            err=True,
        )

    serve(config, on_ready=ready)
