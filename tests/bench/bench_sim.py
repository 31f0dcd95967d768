"""The virtual server's own token-emission lag under load (issue: p99 <= 2 ms at 64 parallel streams).

Starts ``python -m cardgen.sim CodeLlama-7b --gpu A100-80GB`` (a child process) and drives it from this
process with a minimal asyncio client: ``parallel`` closed-loop streams (prompt 256 words, 256 output tokens,
ignore_eos). After a warm-up the server's lag window is reset; at the end the server reports exact quantiles
of how late each token was written after its modelled step end (``GET /cardgen/sim/lag``). Also prints the
server's CPU use and the client's token rate.

Run alone: ``python tests/bench bench_sim`` (``BENCH_SIM_SECONDS`` sets the measured seconds per level).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from urllib.parse import urlsplit

import psutil

from cardgen.sim.launch import running_sim

LEVELS = (16, 64, 256)
WARMUP_S = 2.0
MEASURE_S = float(os.environ.get("BENCH_SIM_SECONDS", "8"))
PROMPT_WORDS = 256
OUTPUT_TOKENS = 256


def _request(host: str, port: int, n: int) -> bytes:
    """Request ``n``: a prompt unique from its first word, as cardgen's are (the virtual server caches shared
    prefixes)."""
    body = json.dumps(
        {
            "model": "CodeLlama-7b",
            "prompt": f"request-{n} " + " ".join(["word"] * PROMPT_WORDS),
            "max_tokens": OUTPUT_TOKENS,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def _user(host: str, port: int, sent: itertools.count, stop_at: float, tokens: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    try:
        while time.monotonic() < stop_at:
            writer.write(_request(host, port, next(sent)))
            await reader.readuntil(b"\r\n\r\n")  # headers
            tail = b""
            while not tail.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
                data = await reader.read(1 << 16)
                if not data:
                    return
                tokens[0] += data.count(b',"text":"')
                tail = (tail + data)[-16:]
    finally:
        writer.close()


async def _drive(url: str, parallel: int, seconds: float, tokens: list[int]) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    sent = itertools.count()
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_user(host, port, sent, stop_at, tokens) for _ in range(parallel)))


def _run_level(sim, parallel: int) -> dict[str, float]:
    proc = psutil.Process(sim.pid)
    tokens = [0]

    async def level() -> tuple[dict[str, float], float, float]:
        task = asyncio.create_task(_drive(sim.url, parallel, WARMUP_S + MEASURE_S, tokens))
        await asyncio.sleep(WARMUP_S)
        await asyncio.to_thread(sim.get_json, "/cardgen/sim/lag?reset=1")
        cpu0, t0, n0 = sum(proc.cpu_times()[:2]), time.monotonic(), tokens[0]
        await asyncio.sleep(MEASURE_S)
        lag = await asyncio.to_thread(sim.get_json, "/cardgen/sim/lag")
        cpu = (sum(proc.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
        rate = (tokens[0] - n0) / (time.monotonic() - t0)
        task.cancel()  # the streams in flight are dropped: the server aborts them
        await asyncio.gather(task, return_exceptions=True)
        return lag, cpu, rate

    lag, cpu, rate = asyncio.run(level())
    return {
        "parallel": parallel,
        "tokens": lag["count"],
        "p50_ms": lag["p50"] * 1e3,
        "p99_ms": lag["p99"] * 1e3,
        "p999_ms": lag["p999"] * 1e3,
        "max_ms": lag["max"] * 1e3,
        "server_cpu": cpu * 100,
        "client_tok_s": rate,
    }


def main() -> None:
    print(
        f"virtual server CodeLlama-7b on A100-80GB; {PROMPT_WORDS} in / {OUTPUT_TOKENS} out, closed loop, "
        f"{MEASURE_S:g} s per level after {WARMUP_S:g} s warm-up; cores: {os.cpu_count()}"
    )
    print(
        f"{'parallel':>8} {'tokens':>7} {'lag p50':>8} {'p99':>7} {'p99.9':>7} {'max':>7} {'srv CPU':>8} {'tok/s':>7}"
    )
    with running_sim(["CodeLlama-7b", "--gpu", "A100-80GB", "--max-lifetime-s", "600"]) as sim:
        for parallel in LEVELS:
            r = _run_level(sim, parallel)
            print(
                f"{r['parallel']:>8} {r['tokens']:>7} {r['p50_ms']:>6.3f}ms {r['p99_ms']:>5.2f}ms "
                f"{r['p999_ms']:>5.2f}ms {r['max_ms']:>5.1f}ms {r['server_cpu']:>7.0f}% {r['client_tok_s']:>7.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
