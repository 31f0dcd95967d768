"""cardgen against llama.cpp's own benchmark, side by side, on the same model, build and machine, in one run.

1. ``llama-bench -p 512,2048 -n 128 -r 3``: the engine's prompt processing (pp) and generation (tg) speeds.
2. ``llama-server -np 1`` on the same GGUF, measured by ``cardgen build --url`` with an ingestion sweep up to 2,048
   tokens and one request at a time at 512 in / 128 out: the card's ingestion speed (1 / slope of TTFT against
   prompt tokens: what a client sees) and decode speed per request at 1 parallel, and llama-server's own account
   of the same requests (each stream's last chunk: ``timings.prompt_ms``, ``predicted_ms``).

The model is a random-weight Llama GGUF (``cardgen.engines.tinygguf``) of a shape big enough that compute, not
overhead, dominates on two CPU cores. The client and the server share those cores: the gap between the columns is
what a client on the same machine sees, and the server's own column says how much of it the engine itself spent.

Run alone: ``python tests/bench bench_llamacpp``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llamacpp_kit import llamacpp_and_model

from cardgen.engines import launched_engine

SUITE = """\
name: llamacpp-vs-llama-bench
endpoint: completions
timeout_s: 300
scenarios:
  - kind: ingest
    name: ingestion
    min_prompt_tokens: 64
    max_prompt_tokens: 2048
    points: 8
    repeats: 3
    output_tokens: 1
  - kind: closed
    name: single
    prompt_tokens: 512
    output_tokens: 128
    parallel: [1]
    min_requests: 6
    max_requests: 12
"""


def llama_bench(binary: Path, model: Path) -> dict[str, tuple[float, float]]:
    """``{"pp512": (tok/s, stddev), "pp2048": ..., "tg128": ...}`` from llama-bench's JSON."""
    done = subprocess.run([str(binary), "-m", str(model), "-p", "512,2048", "-n", "128", "-r", "3", "-o", "json"],
                          capture_output=True, text=True, timeout=900, check=True)
    out = {}
    for row in json.loads(done.stdout):
        name = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        out[name] = (float(row["avg_ts"]), float(row["stddev_ts"]))
    return out


def server_own(run: Path) -> dict[str, float]:
    """llama-server's own speeds over the run's requests (its ``timings``): prompt tokens / prompt time over the
    ingestion sweep's prompts of 1,024 tokens or more, and the median over the single-request point of each
    request's decode speed (tokens after the first / the time from the first to the last), as the card's."""
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    ingest = [r["engine_timings"] for r in records if r["kind"] == "ingest" and r["error"] is None]
    single = [r["engine_timings"] for r in records if r["kind"] == "closed" and r["error"] is None]
    big = [t for t in ingest if t["prompt_n"] >= 1024]
    decode = sorted((t["predicted_n"] - 1) / (t["predicted_ms"] / 1000) for t in single)  # first to last token
    return {"prompt": sum(t["prompt_n"] for t in big) / (sum(t["prompt_ms"] for t in big) / 1000),
            "decode": decode[len(decode) // 2]}


def main() -> None:
    built = llamacpp_and_model()
    if built is None:
        return
    bin_dir, model = built
    bench = llama_bench(bin_dir / "llama-bench", model)
    with tempfile.TemporaryDirectory(prefix="cardgen-bench-llamacpp-") as tmp:
        tmp_path = Path(tmp)
        suite = tmp_path / "suite.yaml"
        suite.write_text(SUITE)
        os.environ["CARDGEN_LLAMA_SERVER"] = str(bin_dir / "llama-server")
        with launched_engine("llamacpp", str(model), engine_args="-np 1 -c 4096", log_path=tmp_path / "server.log",
                             startup_timeout_s=120) as server:
            run = tmp_path / "run"
            built = subprocess.run([sys.executable, "-m", "cardgen", "build", model.stem, "--url", server.url,
                                    "--suite", str(suite), "--out", str(run), "--quiet"], capture_output=True,
                                   text=True, timeout=1800)
        if built.returncode != 0:
            print(f"cardgen build failed: {built.stderr.strip().splitlines()[-1:]}")
            return
        summary = json.loads((run / "summary.json").read_text())
        own = server_own(run)
    card_ingest = summary["ingestion"]["tok_s"]
    single = next(s for s in summary["scenarios"] if s["kind"] == "closed")
    card_decode = single["decode_tok_s"]["p50"]
    print()
    print("| figure | llama-bench | cardgen's card (client) | llama-server's own timings | card / llama-bench |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, ours, server_side, label in (("pp512", card_ingest, own["prompt"], "ingestion (1 / TTFT slope)"),
                                           ("pp2048", card_ingest, own["prompt"], "ingestion (1 / TTFT slope)"),
                                           ("tg128", card_decode, own["decode"], "decode p50 at 1 parallel")):
        ts, sd = bench[name]
        print(f"| {name} vs {label} | {ts:,.0f} ± {sd:,.0f} tok/s | {ours:,.0f} tok/s | {server_side:,.0f} tok/s | "
              f"{ours / ts:.2f} |")
    print(f"\ncard's ingestion: {summary['ingestion']['n_used']} of {summary['ingestion']['n_points']} requests in the "
          f"fit, 95 % CI {summary['ingestion']['tok_s_ci_low'] or 0:,.0f}-{summary['ingestion']['tok_s_ci_high'] or 0:,.0f}"
          f" tok/s; decode: {single['requests']} requests, one at a time, median per request on both sides")
