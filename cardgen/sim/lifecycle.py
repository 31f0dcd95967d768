"""The virtual server's process: listen, report the port, serve until told to stop (a signal, its maximum
lifetime, its parent's death, or a broken engine loop), and ask the OS to wake it on time."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from cardgen.errors import ServerError, UsageError
from cardgen.sim.api import SimServer
from cardgen.sim.config import SimConfig, build_perf
from cardgen.sim.perf import PerfModel


def _write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


async def run_server(
    config: SimConfig, *, perf: PerfModel | None = None, on_ready: Callable[[SimServer], None] | None = None
) -> None:
    """Serve until SIGTERM/SIGINT, ``max_lifetime_s``, the parent process's death, or a driver failure."""
    server = SimServer(config, perf)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reason: list[str] = []

    def request_stop(why: str) -> None:
        if not stop.is_set():
            reason.append(why)
            stop.set()

    server.on_failure = lambda: request_stop("driver failure")
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    port = int(runner.addresses[0][1])  # the bound port, also when asked for 0
    server.url = f"http://{config.host}:{port}"
    signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
    for sig in signals:
        loop.add_signal_handler(sig, request_stop, sig.name)
    if config.max_lifetime_s > 0:
        loop.call_later(config.max_lifetime_s, request_stop, "max lifetime reached")
    watcher = asyncio.create_task(_watch_parent(request_stop)) if config.watch_parent else None
    gc.collect()
    gc.freeze()  # start-up objects leave the collector's view: fewer, shorter pauses in the hot path
    if config.port_file is not None:
        _write_port_file(config.port_file, port)
    if on_ready is not None:
        on_ready(server)
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    print(f"cardgen-sim: stopped ({reason[0] if reason else 'done'})", file=sys.stderr, flush=True)
    if server.failed is not None:
        raise ServerError(f"the virtual server's engine loop failed: {type(server.failed).__name__}: "
                          f"{server.failed}") from server.failed


async def _watch_parent(request_stop: Callable[[str], None]) -> None:
    parent = os.getppid()
    while True:
        await asyncio.sleep(0.5)
        if os.getppid() != parent:
            request_stop("parent process exited")
            return


def _prefer_cpu_when_due() -> str:
    """Ask the OS to wake this process on time: it sleeps most of each step and works for well under a
    millisecond, so a real-time (round-robin) priority costs others nothing and cuts the wake-up latency that
    dominates token-emission lag on a busy machine. Falls back silently (an unprivileged user gets EPERM)."""
    if os.environ.get("CARDGEN_SIM_NO_RT"):
        return "default"
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        return "SCHED_RR"
    except (AttributeError, PermissionError, OSError):
        try:
            os.nice(-5)
            return "nice -5"
        except (PermissionError, OSError):
            return "default"


def serve(config: SimConfig, *, on_ready: Callable[[SimServer], None] | None = None) -> None:
    """Build the PerfModel and run the server in this thread until it stops (see :func:`run_server`)."""
    perf = build_perf(config)  # errors (unknown model or GPU) before any socket is opened
    policy = _prefer_cpu_when_due()
    print(f"cardgen-sim: process scheduling: {policy}", file=sys.stderr, flush=True)
    asyncio.run(run_server(config, perf=perf, on_ready=on_ready))
