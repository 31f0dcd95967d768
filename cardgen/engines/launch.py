"""Start an inference engine as a child process on loopback, wait until it is healthy, and stop it.

    with launched_engine("vllm", "/models/tiny", engine_args="--enforce-eager", log_path=run_dir / "server.log")
            as server:
        measure(server.url)          # server.launch_info -> run.json's ServerInfo.launch

The child runs in its own process group with its output in ``log_path``. At exit -- normal, an exception,
Ctrl-C or SIGTERM -- the whole group gets SIGTERM, then SIGKILL if it has not gone after ``stop_timeout_s``.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

from cardgen.engines.process import recorded_env
from cardgen.engines.registry import ADAPTERS, engine_name
from cardgen.errors import ServerError, UsageError
from cardgen.redact import redact_argv, scrub, secret_values
from cardgen.rundir import log_tail

#: flags cardgen sets itself: a user's --engine-args must not repeat them
RESERVED_FLAGS = ("--host", "--hostname", "--port")


@dataclass
class LaunchedEngine:
    """A running engine that cardgen started."""

    engine: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    launch_info: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)


def _log_head(path: Path, limit: int = 1024 * 1024) -> str:
    try:
        with Path(path).open("rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, taken below the kernel's ephemeral range when it can be: an
    engine binds its port only after seconds of start-up, and a port the kernel hands out for ``bind(0)``
    could be given to someone else meanwhile."""
    low, _ = _ephemeral_range()
    rng = random.Random()
    if low > 20001:
        for _ in range(64):
            port = rng.randrange(20000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _listens_on(pid: int, port: int) -> bool | None:
    """Whether the process ``pid`` or one of its descendants listens on ``port`` (None: cannot tell)."""
    try:

        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                conns = proc.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
                return True
        return False
    except Exception:  # psutil missing or access denied: trust the health check alone
        return None


def parse_arguments(argv: list[str]) -> dict[str, Any]:
    """Every ``--flag value`` / ``--flag=value`` / bare ``--flag`` of a command line as ``{flag_name: value}``
    (dashes to underscores, like the parameters table of a model card). A bare flag is ``True``; a flag given
    twice keeps a list; secrets are masked (:func:`cardgen.redact.redact_argv`, before the line is split into
    flags, so a flag and its value are told apart the same way); words before the first flag are ``positional``."""
    argv = redact_argv(list(argv))
    out: dict[str, Any] = {}

    def is_flag(token: str) -> bool:
        if not token.startswith("-") or token == "-":
            return False
        try:
            float(token)
        except ValueError:
            return True
        return False  # a negative number is a value

    def put(flag: str, value: Any) -> None:
        key = flag.lstrip("-").replace("-", "_")
        if key in out:
            prev = out[key]
            out[key] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            out[key] = value

    i = 0
    positional: list[str] = []
    while i < len(argv):
        token = argv[i]
        if is_flag(token):
            flag, eq, value = token.partition("=")
            if eq:
                put(flag, value)
            elif i + 1 < len(argv) and not is_flag(argv[i + 1]):
                put(flag, argv[i + 1])
                i += 1
            else:
                put(flag, True)
        elif not out:
            positional.append(token)
        else:
            put("positional", token)
        i += 1
    if positional:
        out = {"positional": positional if len(positional) > 1 else positional[0], **out}
    return out


def _copy_scrubbed(proc: subprocess.Popen[bytes], log_path: Path, secrets: list[str]) -> None:
    """Copy the engine's output to its log line by line, each secret of its command line masked: engines echo
    their arguments (vLLM's ``non-default args: {'api_key': ...}``), and the log stays in the run directory.
    Bytes that are not UTF-8 pass through unchanged."""
    assert proc.stdout is not None
    with proc.stdout, log_path.open("ab") as log:
        for line in iter(proc.stdout.readline, b""):
            text = line.decode("utf-8", "surrogateescape")
            log.write(scrub(text, secrets).encode("utf-8", "surrogateescape"))
            log.flush()


def _stop_group(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """SIGTERM the process group, then SIGKILL after ``timeout_s``. Returns how it ended."""
    if proc.poll() is not None:
        _kill_group(proc.pid, signal.SIGKILL)  # stragglers of a leader that already exited
        return f"exited by itself ({proc.returncode})"
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
        how = "stopped with SIGTERM"
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        how = "killed with SIGKILL"
    _kill_group(proc.pid, signal.SIGKILL)  # children that ignored SIGTERM while the leader left
    return how


def _kill_group(pgid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While the engine runs, SIGTERM to cardgen unwinds like Ctrl-C (so the engine is stopped too)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _with_log(message: str, log_path: Path, lines: int = 15) -> ServerError:
    """A one-line ServerError ending with the log's last lines (joined by `` | ``); the lines themselves are
    on the exception as ``log_tail`` for a caller that prints them as they were."""
    tail = log_tail(log_path, lines)
    shown = " | ".join(line.strip() for line in tail.splitlines() if line.strip())
    err = ServerError(f"{message}; last lines of {log_path}: {shown or '(empty)'}")
    err.log_tail = tail
    return err


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, port: int, *, engine: str, log_path: Path,
                  pump: threading.Thread, timeout_s: float, poll_s: float = 0.5) -> float:
    start = time.monotonic()
    impostor = False
    deadline = start + timeout_s
    session = requests.Session()
    while True:
        code = proc.poll()
        if code is not None:
            pump.join(timeout=5)  # its last words reach the log before the log is quoted
            raise _with_log(f"{engine} exited with code {code} before it was ready", log_path)
        try:
            healthy = session.get(url, timeout=2.0).status_code == 200
        except requests.RequestException:
            healthy = False
        if healthy:
            # the answer must come from the engine we started, not from whoever else got the port meanwhile
            if _listens_on(proc.pid, port) is not False:
                return time.monotonic() - start
            impostor = True
        if time.monotonic() >= deadline:
            why = "another process answers on its port" if impostor else "it was not healthy"
            raise _with_log(f"{engine} was not ready at {url} after {timeout_s:.0f} s ({why})", log_path)
        time.sleep(poll_s)


@contextmanager
def launched_engine(engine: str, model: str, *, engine_args: str | list[str] = "", log_path: Path,
                    startup_timeout_s: float = 300, host: str = "127.0.0.1", port: int | None = None,
                    env: Mapping[str, str] | None = None, stop_timeout_s: float = 30) -> Iterator[LaunchedEngine]:
    """Start ``engine`` (vllm, sglang, tgi, llamacpp) serving ``model`` on ``host`` and a free port, wait for
    its health endpoint, yield a :class:`LaunchedEngine`, and stop it however the block ends.

    ``env`` adds to (and overrides) this process' environment for the child. Raises ``UsageError`` for an
    engine cardgen cannot start or reserved flags in ``engine_args``; ``ServerError`` (one line) when the
    engine is not installed, and with the log's last lines when it dies or is not healthy in time.
    """
    name = engine_name(engine)
    adapter = ADAPTERS[name]
    if not adapter.launchable:
        raise UsageError(f"cardgen cannot start {adapter.label}: choose one of vllm, sglang, tgi, llamacpp")
    args = shlex.split(engine_args) if isinstance(engine_args, str) else list(engine_args)
    for arg in args:
        if arg.partition("=")[0] in RESERVED_FLAGS:
            raise UsageError(f"{arg.partition('=')[0]} is chosen by cardgen when it starts the engine: "
                             f"remove it from --engine-args")
    missing = adapter.check_installed()
    if missing:
        raise ServerError(missing)

    port = port or free_port(host)
    cmd = adapter.launch_command(model, host, port, args)
    child_env = {**os.environ}
    for key, value in adapter.default_env().items():
        child_env.setdefault(key, value)
    child_env.update(env or {})
    url = f"http://{host}:{port}"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    version = adapter.installed_version()
    shown = redact_argv(cmd)

    with _sigterm_as_exit():
        with log_path.open("ab") as log:
            log.write(f"# cardgen: starting {name} {version or ''}: {shlex.join(shown)}\n".encode())
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=child_env, start_new_session=True)
        except OSError as exc:
            raise ServerError(f"cannot start {adapter.label} ({cmd[0]}): {exc.strerror or exc}; "
                              f"{adapter.install_hint}") from None
        pump = threading.Thread(target=_copy_scrubbed, args=(proc, log_path, secret_values(cmd)),
                                name=f"{name}-log", daemon=True)
        pump.start()
        started_unix = time.time()
        handle = LaunchedEngine(engine=name, url=url, process=proc, log_path=log_path)
        try:
            ready_s = _wait_healthy(proc, url + adapter.health_path, port, engine=adapter.label,
                                    log_path=log_path, pump=pump, timeout_s=startup_timeout_s)
            handle.launch_info = {
                "engine": name,
                "engine_version": version,
                "command": shown,
                "arguments": parse_arguments(shown[_args_start(shown):]),
                "engine_args": redact_argv(args),
                "env": recorded_env(child_env),
                "host": host,
                "port": port,
                "url": url,
                "pid": proc.pid,
                "log": str(log_path),
                "started_unix": started_unix,
                "ready_after_s": round(ready_s, 3),
            }
            reported = adapter.config_from_log(_log_head(log_path))
            if reported:
                handle.launch_info["server_reported"] = reported
            yield handle
        finally:
            how = _stop_group(proc, stop_timeout_s)
            pump.join(timeout=10)  # the group is gone: its output ends
            handle.launch_info["stopped"] = how
            with suppress(OSError), log_path.open("ab") as log:
                log.write(f"\n# cardgen: {name} {how}\n".encode())


def _args_start(cmd: list[str]) -> int:
    """Where the engine's own arguments begin (after ``python -m module`` or the binary)."""
    if len(cmd) > 2 and cmd[1] == "-m":
        return 3
    return 1
