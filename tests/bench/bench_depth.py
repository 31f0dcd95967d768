"""The depth kind's card against ``llama-bench -d``, side by side, on the same model, build and machine, in one run.

1. ``llama-bench -p 512 -n 128 -d 0,2048,4096 -r 3``: the engine's prompt processing of 512 tokens (pp512) and
   generation of 128 (tg128) after d tokens of context.
2. ``llama-server -np 1`` on the same GGUF, measured by ``cardgen build --url`` with a depth point at each of those
   depths (512 new prompt tokens, 128 decoded, 3 requests after the fill): the card's ingestion at depth (512 /
   TTFT) and decode at depth (1 / TPOT), what a client sees, and llama-server's own account of the same requests
   (``timings``: prompt tokens it computed / their time, tokens predicted / their time), and whether it reused the
   context.

The model is bench_llamacpp's random-weight Llama GGUF (``cardgen.engines.tinygguf``: 8 layers, 512 wide, a
context of 8,192). The client and the server share the machine's cores, as in bench_llamacpp.

Run alone: ``python tests/bench bench_depth``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llamacpp_kit import SHAPE, llamacpp_and_model

from cardgen.engines import launched_engine

DEPTHS = (0, 2048, 4096)
PROMPT, OUTPUT, REPEATS = 512, 128, 3
SUITE = f"""\
name: depth-vs-llama-bench
endpoint: completions
timeout_s: 600
scenarios:
  - {{kind: depth, depths: {list(DEPTHS)}, prompt_tokens: {PROMPT}, output_tokens: {OUTPUT}, repeats: {REPEATS}}}
"""


def llama_bench(binary: Path, model: Path) -> dict[tuple[str, int], tuple[float, float]]:
    """``{("pp", depth): (tok/s, stddev), ("tg", depth): ...}`` from llama-bench's JSON."""
    done = subprocess.run([str(binary), "-m", str(model), "-p", str(PROMPT), "-n", str(OUTPUT),
                           "-d", ",".join(map(str, DEPTHS)), "-r", str(REPEATS), "-o", "json"],
                          capture_output=True, text=True, timeout=1800, check=True)
    out = {}
    for row in json.loads(done.stdout):
        test = "pp" if row["n_prompt"] else "tg"
        out[(test, int(row.get("n_depth", 0)))] = (float(row["avg_ts"]), float(row["stddev_ts"]))
    return out


def main() -> None:
    built = llamacpp_and_model()
    if built is None:
        return
    bin_dir, model = built
    bench = llama_bench(bin_dir / "llama-bench", model)
    with tempfile.TemporaryDirectory(prefix="cardgen-bench-depth-") as tmp:
        tmp_path = Path(tmp)
        suite = tmp_path / "suite.yaml"
        suite.write_text(SUITE)
        os.environ["CARDGEN_LLAMA_SERVER"] = str(bin_dir / "llama-server")
        with launched_engine("llamacpp", str(model), engine_args=f"-np 1 -c {SHAPE.context}",
                             log_path=tmp_path / "server.log", startup_timeout_s=120) as server:
            run = tmp_path / "run"
            built = subprocess.run([sys.executable, "-m", "cardgen", "build", model.stem, "--url", server.url,
                                    "--suite", str(suite), "--out", str(run), "--quiet"], capture_output=True,
                                   text=True, timeout=1800)
        if built.returncode != 0:
            print(f"cardgen build failed: {built.stderr.strip().splitlines()[-1:]}")
            return
        points = json.loads((run / "summary.json").read_text())["kinds"]["depth"]["points"]
    print()
    print("| depth | llama-bench pp512 | card: ingestion at depth (512 / TTFT) | llama-server's own (prompt_n / "
          "prompt_ms) | card / llama-bench | llama-bench tg128 | card: decode at depth (1 / TPOT) | llama-server's "
          "own (predicted_n / predicted_ms) | card / llama-bench | context reused |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for p in points:
        d = p["depth"]
        if p["not_run"]:
            print(f"| {d:,} | {p['not_run']} |")
            continue
        (pp, pp_sd), (tg, tg_sd) = bench[("pp", d)], bench[("tg", d)]
        ingest, decode = p["ingest_tok_s"]["p50"], p["decode_tok_s"]["p50"]
        own_in, own_out = p["engine_ingest_tok_s"] or float("nan"), p["engine_decode_tok_s"] or float("nan")
        print(f"| {d:,} | {pp:,.0f} ± {pp_sd:,.0f} tok/s | {ingest:,.0f} tok/s | {own_in:,.0f} tok/s | "
              f"{ingest / pp:.2f} | {tg:,.1f} ± {tg_sd:,.1f} tok/s | {decode:,.1f} tok/s | {own_out:,.1f} tok/s | "
              f"{decode / tg:.2f} | {p['reuse']} ({p['cached_tokens'] or 0:,.0f} tokens from cache) |")
    print(f"\ncard: {REPEATS} requests at each depth after its fill, one at a time, medians; llama-bench: "
          f"{REPEATS} repetitions, mean ± stddev")
