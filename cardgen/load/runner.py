"""Run the points of a suite with Locust: a local runner, or a master with N worker processes.

The master sequences points: it hands each worker its share of a point, waits until every worker says it
is done, then moves on. Records flow back as they finish and are on disk before the next one arrives. What
the processes say to each other are the typed messages of ``cardgen.load.messages``. A record that cannot
reach the disk (the local sink, a worker's sink, the master's recorder) stops the run: the outcome's
``fatal`` says why.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event
from locust.env import Environment

from cardgen.errors import RunError
from cardgen.load import messages
from cardgen.load.agent import Agent, CardgenUser
from cardgen.load.messages import AgentMessage, Assignment, Done, Fatal, LoadgenTick, Ready, Record, Setup
from cardgen.load.recorder import Recorder
from cardgen.load.sink import RecordSink, fault_from_env
from cardgen.points import Point

log = logging.getLogger("cardgen.load")

WORKER_CONNECT_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    url: str
    points: Sequence[Point]
    setup: Setup  # model, headers, templates, nonce: sent to every agent (index, parts and name set per agent)
    workers: int = 0  # 0 = local runner
    remote_workers: bool = False  # wait for workers started elsewhere instead of spawning them
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    on_point_start: Callable[[Point], None] | None = None
    on_point_end: Callable[[Point], None] | None = None


@dataclass
class RunOutcome:
    interrupted: bool = False  # stopped by a signal, or by ``fatal``
    fatal: str | None = None  # why records could not reach the disk: the run failed
    points_done: list[str] = field(default_factory=list)
    worker_logs: list[str] = field(default_factory=list)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _Stop:
    """Why the run should stop early: SIGINT/SIGTERM (keep what is recorded, end cleanly), or a fatal
    failure to record (the first one is kept)."""

    def __init__(self) -> None:
        self.event = Event()
        self.fatal: str | None = None
        self._handlers: list[Any] = []

    def fail(self, reason: str) -> None:
        if self.fatal is None:
            self.fatal = reason
            log.debug("cardgen: stopping the run: %s", reason)
        self.event.set()

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._handlers.append(gevent.signal_handler(sig, self.event.set))

    def uninstall(self) -> None:
        for h in self._handlers:
            h.cancel()
        self._handlers.clear()


def _wait(event: Event, stop: _Stop, *, check: Callable[[], None] | None = None) -> bool:
    """Wait for ``event``; False when stopped. ``check`` runs every 0.2 s and may raise."""
    while not event.is_set():
        if stop.event.is_set():
            return False
        event.wait(timeout=0.2)
        if check is not None:
            check()
    return not stop.event.is_set()


def _run_points(plan: RunPlan, outcome: RunOutcome, *, assign: Callable[[Point], None], done: Event,
                stop: _Stop, check: Callable[[], None] | None = None) -> None:
    """Run the plan's points one after another: assign, wait until done (or stopped)."""
    for point in plan.points:
        if plan.on_point_start:
            plan.on_point_start(point)
        assign(point)
        if not _wait(done, stop, check=check):
            outcome.interrupted = True
            return
        outcome.points_done.append(point.name)
        if plan.on_point_end:
            plan.on_point_end(point)


def _record(recorder: Recorder, stop: _Stop, record: Callable[[], None], what: str) -> None:
    try:
        record()
    except Exception as exc:  # noqa: BLE001 - a record that cannot be written stops the run, loudly
        stop.fail(f"{what} could not be written: {type(exc).__name__}: {messages.one_line(exc)}")


def run_local(plan: RunPlan, recorder: Recorder) -> RunOutcome:
    stop = _Stop()
    ready, done = Event(), Event()

    def on_message(msg: AgentMessage) -> None:
        match msg:
            case Ready():
                ready.set()
            case Done():
                done.set()
            case LoadgenTick(sample=sample):
                _record(recorder, stop, lambda: recorder.loadgen(sample), "a load-generator sample")
            case _:
                stop.fail(f"unexpected {type(msg).__name__} message from the local agent")

    agent = Agent(worker="local", send=on_message)
    env = Environment(user_classes=[agent.user_class()], host=plan.url)
    sink = RecordSink(recorder.record, on_fatal=lambda reason: stop.fail(f"a record could not be written "
                                                                         f"({reason})"),
                      fail_at=fault_from_env())
    env.events.request.add_listener(sink.on_request)
    runner = env.create_local_runner()
    outcome = RunOutcome()
    stop.install()
    try:
        agent.setup(plan.setup.model_copy(update={"index": 0, "parts": 1}))
        runner.start(1, spawn_rate=1)
        if not _wait(ready, stop):
            outcome.interrupted = True
            return outcome

        def assign(point: Point) -> None:
            done.clear()
            agent.assign(Assignment(point=point, index=0, parts=1))

        _run_points(plan, outcome, assign=assign, done=done, stop=stop)
    finally:
        agent.stop()
        stop.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
        outcome.fatal = stop.fatal
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
    stop = _Stop()

    def on_ready(msg: Ready, node: str) -> None:
        ready.add(node)
        if len(ready) >= n:
            ready_event.set()

    def on_done(msg: Done, node: str) -> None:
        done.add(node)
        if len(done) >= n:
            done_event.set()

    def on_record(msg: Record, node: str) -> None:
        _record(recorder, stop, lambda: recorder.record(msg.record), "a record")

    def on_loadgen(msg: LoadgenTick, node: str) -> None:
        _record(recorder, stop, lambda: recorder.loadgen(msg.sample), "a load-generator sample")

    def on_fatal(msg: Fatal, node: str) -> None:
        stop.fail(f"load worker {msg.worker} could not deliver a record ({msg.error})")

    def on_error(reason: str) -> None:
        stop.fail(f"a message from a load worker was lost ({reason})")

    messages.listen(runner, Ready, on_ready, on_error=on_error)
    messages.listen(runner, Done, on_done, on_error=on_error)
    messages.listen(runner, Record, on_record, on_error=on_error)
    messages.listen(runner, LoadgenTick, on_loadgen, on_error=on_error)
    messages.listen(runner, Fatal, on_fatal, on_error=on_error)

    procs: list[subprocess.Popen] = []
    outcome = RunOutcome()
    stop.install()
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
            if stop.event.is_set():
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
            # remote workers keep the name they were started with
            name = None if plan.remote_workers else f"worker-{i}"
            messages.send(runner, plan.setup.model_copy(update={"index": i, "parts": n, "name": name}),
                          client_id=cid)
        runner.start(n, spawn_rate=n)

        def check_workers() -> None:
            if runner.worker_count < n:
                raise RunError(f"a load worker was lost ({runner.worker_count} of {n} left); records so far are "
                               "on disk")

        if not _wait(ready_event, stop, check=check_workers):
            outcome.interrupted = True
            return outcome

        def assign(point: Point) -> None:
            done.clear()
            done_event.clear()
            for i, cid in enumerate(clients):
                messages.send(runner, Assignment(point=point, index=i, parts=n), client_id=cid)

        _run_points(plan, outcome, assign=assign, done=done_event, stop=stop, check=check_workers)
    finally:
        stop.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stderr:
                outcome.worker_logs.append(p.stderr.read().decode(errors="replace"))
        outcome.fatal = stop.fatal
    return outcome


def run_plan(plan: RunPlan, recorder: Recorder) -> RunOutcome:
    return run_distributed(plan, recorder) if plan.workers > 0 else run_local(plan, recorder)
