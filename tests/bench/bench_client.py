"""Is the client the bottleneck? cardgen's load engine and ``vllm bench serve`` side by side, one table.

Both clients run, one after the other, against one virtual server (fixed 20 ms steps, every stream's token
written in the same instant, as a batching GPU server does) that stamps each chunk's send time
(``--stamp-log``). Per level of parallel streams (closed loop, 512-token prompts, 128 output tokens):

- **CPU per chunk** (marginal): a run of ``3R`` requests minus a run of ``R``, CPU of the client's whole process
  tree (its workers, scraper and every other child, through ``RUSAGE_CHILDREN`` of this process: the server is
  a child too but is reaped only at the end), divided by the extra chunks. Start-up and teardown cancel out.
  Other load on the machine is not counted, but it still moves the figure (a busy neighbour slows the same work:
  caches, the host's scheduling of a VM's cores), so the pair is repeated (``BENCH_CLIENT_REPEATS``, 2) with
  the clients taking turns, and the median is shown with each repeat's figure. Costs per second (the scraper
  of ``/metrics``, the load generator's self-measurement) count per chunk too: at 10 streams they dominate.
- **gap error**: |client gap - server gap| between consecutive chunks of one stream, p50 / p99;
- **abs error**: client arrival - the server's send stamp, p50 / p99 (includes the loopback and the kernel).

Requests are matched to the stamp log by response id: cardgen keeps it in its records; ``vllm bench serve``
sends ``X-Request-Id`` (``bench-<i>``), which the virtual server puts in the id as vLLM does. vLLM's chunk times
are ``perf_counter`` (CLOCK_MONOTONIC, one clock for every process of this host), put on the wall clock with
this process's offset. Errors are taken from the long run.

Then the open loop: cardgen at 100 requests/s (Poisson), its send lag p99 as the run records it (run.json
``loadgen.send_lag_p99_s``: how late each request left after its scheduled time).

``vllm bench serve`` needs vLLM's CPU build in the venv (``bash tests/engines/install_vllm.sh``); without it
its rows say so. Environment: ``BENCH_CLIENT_LEVELS=10,64`` picks levels, ``BENCH_CLIENT_WORKERS=auto|N`` passes
``--workers`` to cardgen (default 0: one process), ``BENCH_CLIENT_ONLY=cardgen|vllm`` runs one client,
``BENCH_CLIENT_CARDGEN_PATH=DIR`` runs another checkout's
cardgen as the client (to measure a before/after; the server stays this checkout's).

Run alone: ``python tests/bench bench_client``. Timing errors depend on what else runs on the machine's cores;
the load average is printed with every row.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cardgen.load.transport import SO_TIMESTAMPNS
from cardgen.sim.launch import running_sim

ROOT = Path(__file__).resolve().parents[2]
STEP_S = 0.020
FIXED = {"prefill_tok_s": 1_000_000.0, "step_overhead_s": STEP_S, "per_seq_s": 0.00001, "kv_capacity_tokens": 1 << 22,
         "block_size": 16, "max_num_seqs": 1024, "max_num_batched_tokens": 1 << 18}
PROMPT_TOKENS = 512
OUTPUT_TOKENS = 128
MODEL = "bench-model"
# closed-loop rounds (each of `parallel` requests) of the short and the long run, per level: enough extra chunks
# in the long run that a 50 ms wobble of start-up CPU moves the per-chunk figure by under ~1.5 us at 64 and 256
ROUNDS = {10: (4, 12), 64: (2, 6), 256: (1, 3)}
REPEATS = int(os.environ.get("BENCH_CLIENT_REPEATS", "2"))  # (short, long) pairs per client and level
OPEN_RATE = 100.0
OPEN_REQUESTS = 600


@dataclass
class Run:
    cpu_s: float
    chunks: int
    errors: list[str]
    pairs: list[tuple[list[float], list[float]]]  # (client chunk times, server send stamps) per request
    send_lag_p99_s: float | None = None


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _stamps(path: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                s = json.loads(line)
                out[s["id"]] = s["times"]  # a repeated id (vLLM's test request): the later one
    return out


# the cores the clients run on (None: any); set by ``pinned`` (every child of a client inherits them)
CLIENT_CPUS: set[int] | None = None


def _timed(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> tuple[float, str]:
    """Run a client to its end (in ``cwd``: ``python -m`` puts the working directory first on the path, which
    must not be a checkout other than the one meant); its process tree's CPU seconds and, when it failed, its
    last words."""
    cpu0 = _children_cpu()
    cpus = CLIENT_CPUS
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    cpu = _children_cpu() - cpu0
    tail = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return cpu, tail


def _cardgen_env() -> dict[str, str]:
    env = dict(os.environ)
    other = os.environ.get("BENCH_CLIENT_CARDGEN_PATH")
    if other:
        env["PYTHONPATH"] = other + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_cardgen(url: str, stamps: Path, scenario: str, tmp: Path, tag: str) -> Run:
    suite = tmp / f"{tag}.yaml"
    suite.write_text(f"name: bench\nscenarios:\n- {scenario}\n")
    run_dir = tmp / f"run-{tag}"
    workers = os.environ.get("BENCH_CLIENT_WORKERS", "0")
    cpu, tail = _timed([sys.executable, "-m", "cardgen", "build", MODEL, "--url", url, "--suite", str(suite),
                        "--out", str(run_dir), "--no-card", "--quiet", "--workers", workers], cwd=tmp,
                       env=_cardgen_env())
    if tail:
        return Run(cpu, 0, [tail], [])
    by_id = _stamps(stamps)
    pairs, errors, chunks = [], [], 0
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        r = json.loads(line)
        chunks += len(r["chunk_times"])
        if r["error"] is not None:
            errors.append(r["error"])
        elif r["response_id"] in by_id:
            pairs.append((r["chunk_times"], by_id[r["response_id"]]))
    info = json.loads((run_dir / "run.json").read_text())
    return Run(cpu, chunks, errors, pairs, (info.get("loadgen") or {}).get("send_lag_p99_s"))


def _vllm_cli() -> tuple[list[str], dict[str, str]] | None:
    """``vllm bench serve`` from the venv, with the dist-info shim its CPU build needs; None without vLLM."""
    vllm = Path(sys.executable).parent / "vllm"
    if not vllm.exists():
        return None
    shim = ROOT / ".venv" / "cardgen-cache" / "vllm-shim"
    meta = shim / "vllm-0.0.dist-info" / "METADATA"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0\n")
    # vLLM's CPU kernels (vllm._C) are built for AVX-512 and die with SIGILL on a CPU without it, already at
    # import; the bench client (asyncio + aiohttp) never calls them, so they are stubbed out
    (shim / "sitecustomize.py").write_text(KERNEL_STUB)
    env = {**os.environ, "PYTHONPATH": str(shim), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    return [str(vllm), "bench", "serve"], env


KERNEL_STUB = """import sys, types
for name in ("vllm._C", "vllm._moe_C_stable_libtorch"):
    sys.modules.setdefault(name, types.ModuleType(name))
"""


def _tokenizer_dir() -> Path:
    from cardgen.engines.tinymodel import make_tiny_model

    return make_tiny_model(ROOT / ".venv" / "cardgen-cache")


def run_vllm(url: str, stamps: Path, parallel: int, requests: int, tmp: Path, tag: str) -> Run:
    cli = _vllm_cli()
    if cli is None:
        return Run(0.0, 0, ["vLLM is not installed (bash tests/engines/install_vllm.sh)"], [])
    argv, env = cli
    result = tmp / f"vllm-{tag}.json"
    cpu, tail = _timed([*argv, "--base-url", url, "--endpoint", "/v1/completions", "--model", MODEL,
                        "--tokenizer", str(_tokenizer_dir()), "--dataset-name", "random",
                        "--random-input-len", str(PROMPT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS),
                        "--ignore-eos", "--max-concurrency", str(parallel), "--num-prompts", str(requests),
                        "--request-rate", "inf", "--request-id-prefix", f"{tag}-", "--seed", str(int(time.time())),
                        "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(tmp),
                        "--result-filename", result.name], cwd=tmp, env=env)
    if tail:
        return Run(cpu, 0, [tail], [])
    data = json.loads(result.read_text())
    offset = _wall_minus_monotonic()
    by_id = _stamps(stamps)
    pairs, errors, chunks = [], [], 0
    for i, (start, ttft, itls, err) in enumerate(zip(data["start_times"], data["ttfts"], data["itls"],
                                                     data["errors"], strict=True)):
        if err or not ttft:
            errors.append(str(err)[:120] or "no first token")
            continue
        times = list(start + offset + ttft + np.concatenate(([0.0], np.cumsum(itls))))
        chunks += len(times)
        server = by_id.get(f"cmpl-{tag}-{i}")
        if server is not None:
            pairs.append((times, server))
    return Run(cpu, chunks, errors, pairs)


def _wall_minus_monotonic() -> float:
    """time.time() - time.perf_counter(), the smallest of several readings (the least interrupted pair)."""
    best = None
    for _ in range(50):
        a = time.perf_counter()
        w = time.time()
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    assert best is not None
    return best[1]


def errors_ms(pairs: list[tuple[list[float], list[float]]]) -> dict[str, float]:
    gaps, absolute = [], []
    for client, server in pairs:
        n = min(len(client), len(server))
        if n == 0:
            continue
        c, s = np.asarray(client[:n]), np.asarray(server[:n])
        absolute.append(c - s)
        gaps.append(np.abs(np.diff(c) - np.diff(s)))
    if not absolute:
        return {}
    a, g = np.concatenate(absolute) * 1e3, np.concatenate(gaps) * 1e3
    return {"gap_p50": float(np.percentile(g, 50)), "gap_p99": float(np.percentile(g, 99)),
            "abs_p50": float(np.percentile(a, 50)), "abs_p99": float(np.percentile(a, 99)), "matched": len(absolute)}


def _set_cores(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


@contextmanager
def pinned(server_pid: int) -> Iterator[bool]:
    """The server on core 0 and the clients (with their workers and scraper) on core 1 while the block runs:
    a machine where they do not share cores, as near as a 2-core one gets (the kernel's own work, interrupts
    and the loopback, still lands on either). Yields False, pinning nothing, with fewer than 2 cores."""
    global CLIENT_CPUS
    every = os.sched_getaffinity(0)
    if len(every) < 2 or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    server, client = min(every), sorted(every)[1]
    _set_cores(server_pid, {server})
    CLIENT_CPUS = {client}
    try:
        yield True
    finally:
        CLIENT_CPUS = None
        _set_cores(server_pid, every)


def read_floor(streams: int = 256, steps: int = 200) -> tuple[float, float, int]:
    """What one read costs with nothing else in the way: a bare Python epoll loop (this process) reading
    ``streams`` loopback connections, to each of which a forked sender writes one 205-byte chunk every 20 ms,
    ``recvmsg`` with the receive stamp as cardgen reads. CPU per read: user and kernel microseconds, reads."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(streams)
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # the sender
        try:
            outs = [socket.create_connection(("127.0.0.1", port)) for _ in range(streams)]
            message = b"c8\r\n" + b"x" * 200 + b"\r\n"
            t = time.time() + 0.2
            for _ in range(steps):
                t += STEP_S
                time.sleep(max(0.0, t - time.time()))
                for out in outs:
                    out.send(message)
            for out in outs:
                out.close()
        finally:
            os._exit(0)
    conns = [listener.accept()[0] for _ in range(streams)]
    listener.close()
    poller, by_fd = select.epoll(), {}
    for conn in conns:
        conn.setblocking(False)
        conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        poller.register(conn.fileno(), select.EPOLLIN)
        by_fd[conn.fileno()] = conn
    before = resource.getrusage(resource.RUSAGE_SELF)
    reads, still_open = 0, streams
    while still_open:
        for fd, _ in poller.poll():
            data, _, _, _ = by_fd[fd].recvmsg(65536, 32)
            if data:
                reads += 1
            else:
                poller.unregister(fd)
                still_open -= 1
    after = resource.getrusage(resource.RUSAGE_SELF)
    os.waitpid(pid, 0)
    poller.close()
    for conn in conns:
        conn.close()
    return ((after.ru_utime - before.ru_utime) / reads * 1e6, (after.ru_stime - before.ru_stime) / reads * 1e6,
            reads)


def _closed(parallel: int, requests: int) -> str:
    return (f"{{kind: closed, prompt_tokens: {PROMPT_TOKENS}, output_tokens: {OUTPUT_TOKENS}, parallel: {parallel}, "
            f"min_requests: {requests}}}")


def _table_row(client: str, streams: str, cpu: str, timed: list[tuple[list[float], list[float]]], chunks: int,
               errors: list[str], load: str) -> str:
    """One row of the table: the timing errors of the ``timed`` requests; failed when none was matched."""
    if not timed:
        return f"| {client} | {streams} | failed: {(errors or ['no request matched'])[0][:90]} | | | | {load} |"
    e = errors_ms(timed)
    return (f"| {client} | {streams} | {cpu} | {e['gap_p50']:.2f} / {e['gap_p99']:.2f} | {e['abs_p50']:.2f} / "
            f"{e['abs_p99']:.2f} | {chunks} | {load} |")


def _row(client: str, streams: str, pairs: list[tuple[Run, Run]], load: str) -> str:
    """One table row from repeated (short, long) runs: the median marginal CPU (each repeat's in brackets), the
    timing errors of every long run pooled."""
    longs = [long for _, long in pairs]
    cpus = []
    for short, long in pairs:
        extra = long.chunks - short.chunks
        cpus.append((long.cpu_s - short.cpu_s) / extra * 1e6 if extra > 0 else float("nan"))
    failed = sum(len(long.errors) for long in longs)
    each = ", ".join(f"{c:.1f}" for c in cpus)
    cpu = (f"{float(np.median(cpus)):.1f} ({each}; {pairs[0][1].chunks - pairs[0][0].chunks} chunks"
           f"{f'; {failed} failed' if failed else ''})")
    return _table_row(client, streams, cpu, [p for long in longs for p in long.pairs],
                      sum(long.chunks for long in longs),
                      [e for short, long in pairs for e in long.errors + short.errors], load)


def _timing_row(client: str, streams: str, run: Run, load: str) -> str:
    """A row of timing errors alone (one run: its CPU includes start-up, so none is shown)."""
    return _table_row(client, streams, "–", run.pairs, run.chunks, run.errors, load)


def main() -> None:
    levels = [int(x) for x in os.environ.get("BENCH_CLIENT_LEVELS", "10,64,256").split(",") if x]
    clients = [c for c in ("cardgen", "vllm bench serve")
               if os.environ.get("BENCH_CLIENT_ONLY", c) == c or os.environ.get("BENCH_CLIENT_ONLY") == c.split()[0]]
    print(f"virtual server: fixed {STEP_S * 1e3:.0f} ms steps; closed loop {PROMPT_TOKENS} in / {OUTPUT_TOKENS} out; "
          f"cores: {os.cpu_count()}; cardgen --workers {os.environ.get('BENCH_CLIENT_WORKERS', '0')}"
          + (f"; cardgen from {os.environ['BENCH_CLIENT_CARDGEN_PATH']}" if os.environ.get("BENCH_CLIENT_CARDGEN_PATH")
             else ""), flush=True)
    print("| client | streams | CPU us/chunk, marginal | gap error p50 / p99 ms | abs error p50 / p99 ms | chunks "
          "| load avg |")
    print("|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        stamps = tmp / "stamps.jsonl"
        argv = [MODEL, "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--stamp-log", str(stamps),
                "--max-lifetime-s", "3600"]
        with running_sim(argv, log_path=tmp / "sim.log") as sim:
            # one small run of each client first, not counted: the first run after a change compiles the
            # modules (.pyc), which would count as start-up CPU in one run of a pair and not in the other
            for client in clients:
                if client == "cardgen":
                    run_cardgen(sim.url, stamps, _closed(1, 1), tmp, "warm")
                else:
                    run_vllm(sim.url, stamps, 1, 1, tmp, "warm")
            for parallel in levels:
                short_rounds, long_rounds = ROUNDS.get(parallel, (2, 6))
                pairs: dict[str, list[tuple[Run, Run]]] = {c: [] for c in clients}
                for rep in range(REPEATS):  # the clients take turns, so both see the machine's load alike
                    for client in clients:
                        runs = []
                        for rounds in (short_rounds, long_rounds):
                            tag = f"{'c' if client == 'cardgen' else 'v'}{parallel}r{rounds}x{rep}"
                            if client == "cardgen":
                                runs.append(run_cardgen(sim.url, stamps, _closed(parallel, parallel * rounds), tmp,
                                                        tag))
                            else:
                                runs.append(run_vllm(sim.url, stamps, parallel, parallel * rounds, tmp, tag))
                        pairs[client].append((runs[0], runs[1]))
                for client in clients:
                    print(_row(client, str(parallel), pairs[client], _load()), flush=True)
            with pinned(sim.process.pid) as pin:
                if pin:  # timing only: one long run per client and level
                    for parallel in levels:
                        rounds = ROUNDS.get(parallel, (2, 6))[1]
                        for client in clients:
                            tag = f"{'c' if client == 'cardgen' else 'v'}{parallel}pin"
                            run = (run_cardgen(sim.url, stamps, _closed(parallel, parallel * rounds), tmp, tag)
                                   if client == "cardgen" else
                                   run_vllm(sim.url, stamps, parallel, parallel * rounds, tmp, tag))
                            print(_timing_row(client, f"{parallel}, own core", run, _load()), flush=True)
            for cores in ("shared cores", "own core"):
                with pinned(sim.process.pid) as pin:
                    if cores == "own core" and not pin:
                        continue
                    open_run = run_cardgen(sim.url, stamps, f"{{kind: open, prompt_tokens: {PROMPT_TOKENS}, "
                                                            f"output_tokens: {OUTPUT_TOKENS}, rates: [{OPEN_RATE:g}], "
                                                            f"num_requests: {OPEN_REQUESTS}}}", tmp, f"open{cores[0]}")
                lag = open_run.send_lag_p99_s
                print(f"open loop, cardgen, {OPEN_RATE:g} req/s Poisson, {OPEN_REQUESTS} requests, {cores}: send lag "
                      "p99 " + (f"{lag * 1e3:.2f} ms" if lag is not None else f"unknown ({open_run.errors[:1]})")
                      + f"; {len(open_run.errors)} failed; load avg {_load()}", flush=True)
    user, kernel, reads = read_floor()
    print(f"floor: a bare Python epoll loop reading 256 loopback streams (recvmsg with the receive stamp, nothing "
          f"else): {user + kernel:.1f} us CPU per read ({user:.1f} user, {kernel:.1f} kernel; {reads} reads)",
          flush=True)


if __name__ == "__main__":
    main()
