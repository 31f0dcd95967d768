"""Run the points of a suite with Locust: a local runner, or a master with N worker processes.

The master sequences points: it hands each worker its share of a point, waits until every worker says it
is done, then moves on. Records flow back as they finish and are on disk before the next one arrives.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event
from locust.env import Environment

from cardgen.errors import RunError
from cardgen.load.agent import Agent, CardgenUser
from cardgen.load.recorder import Recorder
from cardgen.points import Point

log = logging.getLogger("cardgen.load")

WORKER_CONNECT_TIMEOUT_S = 60.0


@dataclass
class RunPlan:
    url: str
    points: list[Point]
    setup: dict[str, Any]  # model, headers, templates, nonce: sent to every agent
    workers: int = 0  # 0 = local runner
    remote_workers: bool = False  # wait for workers started elsewhere instead of spawning them
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    on_point_start: Callable[[Point], None] | None = None
    on_point_end: Callable[[Point], None] | None = None


@dataclass
class RunOutcome:
    interrupted: bool = False
    points_done: list[str] = field(default_factory=list)
    worker_logs: list[str] = field(default_factory=list)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _Interrupt:
    """SIGINT/SIGTERM while a run is on: stop sending, keep what is recorded, end cleanly."""

    def __init__(self) -> None:
        self.event = Event()
        self._handlers: list[Any] = []

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._handlers.append(gevent.signal_handler(sig, self.event.set))

    def uninstall(self) -> None:
        for h in self._handlers:
            h.cancel()
        self._handlers.clear()


def _wait(event: Event, interrupt: _Interrupt, *, check: Callable[[], None] | None = None) -> bool:
    """Wait for ``event``; False when interrupted. ``check`` runs every second and may raise."""
    while not event.is_set():
        if interrupt.event.is_set():
            return False
        event.wait(timeout=0.2)
        if check is not None:
            check()
    return True


def _run_points(plan: RunPlan, outcome: RunOutcome, *, assign: Callable[[Point], None], done: Event,
                interrupt: _Interrupt, check: Callable[[], None] | None = None) -> None:
    """Run the plan's points one after another: assign, wait until done (or interrupted)."""
    for point in plan.points:
        if plan.on_point_start:
            plan.on_point_start(point)
        assign(point)
        if not _wait(done, interrupt, check=check):
            outcome.interrupted = True
            return
        outcome.points_done.append(point.name)
        if plan.on_point_end:
            plan.on_point_end(point)


def run_local(plan: RunPlan, recorder: Recorder) -> RunOutcome:
    env = Environment(user_classes=[CardgenUser], host=plan.url)
    ready, done = Event(), Event()

    def emit(kind: str, data: dict[str, Any]) -> None:
        if kind == "loadgen":
            recorder.loadgen(data)
        elif kind == "ready":
            ready.set()
        elif kind == "done":
            done.set()

    agent = Agent(worker="local", emit=emit)
    env.cardgen_agent = agent  # type: ignore[attr-defined]
    env.events.request.add_listener(recorder.on_request_event)
    runner = env.create_local_runner()
    interrupt = _Interrupt()
    outcome = RunOutcome()
    recorder.on_fatal = lambda exc: interrupt.event.set()
    interrupt.install()
    try:
        agent.setup({**plan.setup, "index": 0, "parts": 1})
        runner.start(1, spawn_rate=1)
        if not _wait(ready, interrupt):
            outcome.interrupted = True
            return outcome
        def assign(point: Point) -> None:
            done.clear()
            agent.assign(point.to_wire(), index=0, parts=1)

        _run_points(plan, outcome, assign=assign, done=done, interrupt=interrupt)
    finally:
        agent.stopping = True
        agent.queue.put((None, 0, 1))
        interrupt.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
    return outcome


def run_distributed(plan: RunPlan, recorder: Recorder) -> RunOutcome:
    n = plan.workers
    port = plan.master_port or _free_port(plan.master_bind_host)
    env = Environment(user_classes=[CardgenUser], host=plan.url)
    runner = env.create_master_runner(master_bind_host=plan.master_bind_host, master_bind_port=port)
    ready: set[str] = set()
    ready_event = Event()
    done: set[str] = set()
    done_event = Event()
    interrupt = _Interrupt()
    recorder.on_fatal = lambda exc: interrupt.event.set()

    def on_record(environment: Any, msg: Any, **_: Any) -> None:
        recorder.record(msg.data)

    def on_loadgen(environment: Any, msg: Any, **_: Any) -> None:
        recorder.loadgen(msg.data)

    def on_ready(environment: Any, msg: Any, **_: Any) -> None:
        ready.add(msg.node_id)
        if len(ready) >= n:
            ready_event.set()

    def on_done(environment: Any, msg: Any, **_: Any) -> None:
        done.add(msg.node_id)
        if len(done) >= n:
            done_event.set()

    for name, handler in (("cardgen_record", on_record), ("cardgen_loadgen", on_loadgen),
                          ("cardgen_ready", on_ready), ("cardgen_done", on_done)):
        runner.register_message(name, handler)

    procs: list[subprocess.Popen] = []
    outcome = RunOutcome()
    interrupt.install()
    try:
        if not plan.remote_workers:
            env_vars = {**os.environ, "PYTHONUNBUFFERED": "1"}
            for i in range(n):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "cardgen.load.worker", "--master-host", plan.master_bind_host,
                     "--master-port", str(port), "--url", plan.url, "--name", f"worker-{i}",
                     "--parent-pid", str(os.getpid())],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env_vars, start_new_session=True))
        else:
            log.warning("waiting for %d workers: run `cardgen worker --master-host <this host> --master-port %d "
                        "--url %s` on each", n, port, plan.url)
        deadline = time.time() + WORKER_CONNECT_TIMEOUT_S
        while runner.worker_count < n:
            if interrupt.event.is_set():
                outcome.interrupted = True
                return outcome
            for p in procs:
                if p.poll() is not None:
                    err = (p.stderr.read() if p.stderr else b"").decode(errors="replace").strip().splitlines()
                    raise RunError(f"a load worker exited at start: {err[-1] if err else 'no output'}")
            if time.time() > deadline:
                raise RunError(f"only {runner.worker_count} of {n} load workers connected within "
                               f"{WORKER_CONNECT_TIMEOUT_S:.0f} s")
            gevent.sleep(0.1)
        clients = [c.id for c in runner.clients.all][:n]
        for i, cid in enumerate(clients):
            setup = {**plan.setup, "index": i, "parts": n}
            if not plan.remote_workers:  # remote workers keep the name they were started with
                setup["name"] = f"worker-{i}"
            runner.send_message("cardgen_setup", setup, client_id=cid)
        runner.start(n, spawn_rate=n)

        def check_workers() -> None:
            if runner.worker_count < n:
                raise RunError(f"a load worker was lost ({runner.worker_count} of {n} left); records so far are "
                               "on disk")

        if not _wait(ready_event, interrupt, check=check_workers):
            outcome.interrupted = True
            return outcome
        def assign(point: Point) -> None:
            done.clear()
            done_event.clear()
            for i, cid in enumerate(clients):
                runner.send_message("cardgen_point", {"point": point.to_wire(), "index": i, "parts": n},
                                    client_id=cid)

        _run_points(plan, outcome, assign=assign, done=done_event, interrupt=interrupt, check=check_workers)
    finally:
        interrupt.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stderr:
                outcome.worker_logs.append(p.stderr.read().decode(errors="replace"))
    return outcome


def run_plan(plan: RunPlan, recorder: Recorder) -> RunOutcome:
    return run_distributed(plan, recorder) if plan.workers > 0 else run_local(plan, recorder)
