"""Start the virtual server as a child process and stop it again: what ``cardgen build`` and the tests use.

    with running_sim(["CodeLlama-7b", "--gpu", "A100-80GB"]) as sim:
        requests.post(f"{sim.url}/v1/completions", json=...)

The child is ``python -m cardgen serve-sim ARGV --host 127.0.0.1 --port 0 --port-file TMP``; it also stops by itself
when this process dies or after ``--max-lifetime-s``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from cardgen.errors import ServerError

STOP_GRACE_S = 5.0


@dataclass
class SimHandle:
    """A running virtual server."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def get_json(self, path: str, *, timeout_s: float = 5.0) -> Any:
        """GET ``path`` (e.g. ``/cardgen/sim/lag``) and decode the JSON answer."""
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout_s) as resp:  # loopback
            return json.loads(resp.read())

    @cached_property
    def describe(self) -> dict[str, Any]:
        """``GET /cardgen/sim``: the model, the GPU and the performance model's own description."""
        description: dict[str, Any] = self.get_json("/cardgen/sim")
        return description


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return "(no log: pass log_path to see the server's output)"
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as resp:  # loopback
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop_process(process: subprocess.Popen[bytes], *, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def running_sim(
    argv: list[str],
    *,
    startup_timeout_s: float = 30,
    log_path: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[SimHandle]:
    """Run ``cardgen serve-sim *argv`` on a free loopback port while the block runs.

    ``argv`` is the model and options of ``cardgen serve-sim`` without ``--host``/``--port``. The server's
    output goes to ``log_path`` (or nowhere). Raises :class:`ServerError`, with the log's last lines, when it
    exits or does not answer ``/health`` within ``startup_timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="cardgen-sim-") as tmp:
        port_file = Path(tmp) / "port"
        cmd = [
            sys.executable,
            "-m",
            "cardgen",
            "serve-sim",
            *argv,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ]
        out: IO[bytes] | int
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            out = log_path.open("ab")
        else:
            out = subprocess.DEVNULL
        child_env = {**os.environ, **(env or {})}
        try:
            process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env
            )
        finally:
            if not isinstance(out, int):
                out.close()
        try:
            url = _wait_ready(process, port_file, startup_timeout_s, log_path)
            yield SimHandle(url=url, process=process, log_path=log_path)
        finally:
            stop_process(process)


def _wait_ready(
    process: subprocess.Popen[bytes], port_file: Path, timeout_s: float, log_path: Path | None
) -> str:
    deadline = time.monotonic() + timeout_s
    url: str | None = None
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise ServerError(f"the virtual server exited with code {code} while starting: {_tail(log_path)}")
        if url is None and port_file.exists():
            text = port_file.read_text(encoding="utf-8").strip()
            if text.isdigit():
                url = f"http://127.0.0.1:{int(text)}"
        if url is not None and _healthy(url):
            return url
        time.sleep(0.05)
    raise ServerError(f"the virtual server did not answer /health within {timeout_s:g} s: {_tail(log_path)}")
