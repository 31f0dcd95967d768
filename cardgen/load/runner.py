"""Run the points of a suite with Locust: a local runner, or a master with N worker processes.

The master sequences points: it hands each worker its share of a point, waits until every worker says it
is done, then moves on. Records flow back as they finish and are on disk before the next one arrives. What
the processes say to each other are the typed messages of ``cardgen.load.messages``. A record that cannot
reach the disk (the local sink, a worker's sink, the master's recorder) stops the run: the outcome's
``fatal`` says why.

The master is where every agent's records meet (and, from workers, reach the master's clock and are counted against their sender:
``cardgen.load.clocks``, ``cardgen.load.fleet``; a worker lost mid-point stops the run, its requests in flight
recorded as lost, once the others have ended theirs): it is the load engine's interpreter for the controller
(:func:`cardgen.scenarios.run_points`, which sequences the points as it does for the virtual-time driver). Each
point's records go to its judge here (a closed loop's precision, judged on every agent's records, stops every
agent: ``StopPoint``), and the scraper's readings during a point (:class:`~cardgen.load.scraper.ScrapeLog`) are
what the controller judges a closed loop's saturation on.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust.env import Environment
from locust.runners import STATE_MISSING

from cardgen.buildconfig import LoadOptions
from cardgen.errors import RunError, one_line
from cardgen.kinds.program import Judge, Said
from cardgen.load import clocks, messages
from cardgen.load.agent import Agent, CardgenUser
from cardgen.load.fleet import Fleet
from cardgen.load.messages import (
    AgentMessage,
    Assignment,
    ClockPing,
    ClockPong,
    Done,
    Fatal,
    Listening,
    LoadgenTick,
    Reached,
    Ready,
    Record,
    Setup,
    StopPoint,
)
from cardgen.load.scraper import ScrapeLog
from cardgen.load.sink import RecordSink, fault_from_env
from cardgen.load.wake import CpusAwake
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.recorder import Recorder
from cardgen.rundir import RunDir, log_tail
from cardgen.saturation import Reading
from cardgen.scenarios import Ran, run_points
from cardgen.schemas.records import ErrorKind, RequestRecord
from cardgen.schemas.run import LoadWorker, PointOutcome

log = logging.getLogger("cardgen.load")

WORKER_CONNECT_TIMEOUT_S = 60.0
DRAIN_S = 60.0  # after a worker is lost, the most the others are given to end the requests they have in flight


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    """What the load engine runs: the points against ``url``, how (``load``: the Locust master, remote workers,
    the scrape interval, ``--run-saturated``, as the build's :class:`~cardgen.buildconfig.LoadOptions` holds
    them), and whom it tells as each point starts and ends."""

    url: str
    points: Sequence[Point]
    setup: Setup  # model, headers, templates, nonce: sent to every agent (index, parts and name set per agent)
    workers: int = 0  # 0 = local runner (``auto`` resolved already)
    load: LoadOptions = LoadOptions()  # the Locust master, remote workers, scrape interval, --run-saturated
    attempts: Mapping[str, int] = field(default_factory=dict)  # point name -> the attempt stamped into its
    # records and outcome (``cardgen resume`` reruns a cut-off point as attempt 1, 2...); absent: 0
    run_dir: Path | None = None  # where local workers' logs go (worker-N.log; None: a temporary folder)
    server_metrics: Path | None = None  # the scraper's server_metrics.jsonl: gauges of closed-loop points
    # (None: no /metrics; saturation is then judged on the requests' speed alone)
    on_point_start: Callable[[Point, PointOutcome], None] | None = None  # the point starts (started_unix, attempt)
    # every point of the plan, in order, once it ended: run (``stop`` says why it stopped), skipped
    # (STOP_SKIPPED, never started) or cut off (STOP_INTERRUPTED, no ``ended_unix``; no later point follows)
    on_point_end: Callable[[Point, PointOutcome], None] | None = None


@dataclass
class RunOutcome:
    interrupted: bool = False  # stopped by a signal, or by ``fatal``
    fatal: str | None = None  # why records could not reach the disk: the run failed
    points_done: list[str] = field(default_factory=list)
    points: list[PointOutcome] = field(default_factory=list)  # as given to ``on_point_end``
    worker_errors: list[str] = field(default_factory=list)  # local workers that ended badly: code, last line, log
    workers: list[LoadWorker] = field(default_factory=list)  # each worker process: run.json ``load_workers``
    cpus_awake: str | None = None  # what --low-latency came to in this process, when it ran the load itself


def freeze_heap() -> None:
    """Leave every object alive now (the imports, the set-up) out of the garbage collector's full passes: with
    Locust, gevent, pydantic and numpy loaded, a full pass took over 100 ms here, a stall of the event loop that
    stamps chunks and sends the open loop's requests. Called once, just before the points run."""
    gc.collect()
    gc.freeze()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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


class _Dones:
    """The ``Done`` of every agent for the point under way."""

    def __init__(self, agents: int) -> None:
        self.agents = agents
        self.by_node: dict[str, Done] = {}
        self.event = Event()

    def clear(self) -> None:
        self.by_node.clear()
        self.event.clear()

    def add(self, msg: Done, node: str) -> None:
        self.by_node[node] = msg
        if len(self.by_node) >= self.agents:
            self.event.set()


class _ServerGone:
    """Notices a server that stopped answering (it died, or the network to it went): every request for
    :data:`GONE_AFTER_S` seconds, at least :data:`GONE_AFTER_REQUESTS` of them, failed to connect and none
    succeeded. The run then stops as cut off, so that ``cardgen resume`` can continue it once the server is
    back, instead of recording failures to the end of the suite."""

    def __init__(self) -> None:
        self.since: float | None = None  # the first connect failure of the current streak (its send time)
        self.count = 0

    def gone(self, rec: RequestRecord) -> bool:
        if rec.error_kind != ErrorKind.CONNECT:
            self.since, self.count = None, 0
            return False
        if self.since is None:
            self.since = rec.sent_at
        self.count += 1
        return self.count >= GONE_AFTER_REQUESTS and (rec.end_at or rec.sent_at) - self.since >= GONE_AFTER_S


GONE_AFTER_S = 5.0
GONE_AFTER_REQUESTS = 5


class _LoadInterpreter:
    """The load engine as the controller's :class:`~cardgen.scenarios.Interpreter`: a point is assigned to every
    agent and runs until each says it is done (or the run stops); its records reach the point's judge here, where
    every agent's meet, and the judge's verdict goes back to every agent (``stop_point``). A server that stopped
    answering (:class:`_ServerGone`) stops the run as cut off."""

    def __init__(self, plan: LoadPlan, *, recorder: Recorder, assign: Callable[[Point, int], None],
                 stop_point: Callable[[str], None], dones: _Dones, stop: _Stop,
                 check: Callable[[], None] | None) -> None:
        self.assign, self.stop_point, self.dones, self.stop, self.check = assign, stop_point, dones, stop, check
        self.scrapes = ScrapeLog(plan.server_metrics, plan.setup.engine) if plan.server_metrics is not None else None
        self.scrape_interval_s = plan.load.scrape_interval_s  # points wait for one read of /metrics between them
        self.last_end: float | None = None  # when the last point's last request ended
        self.current: tuple[Point, Judge, float] | None = None
        self.gone = _ServerGone()
        recorder.listeners.append(self.on_record)

    def on_record(self, rec: RequestRecord) -> None:
        current = self.current
        if current is not None and rec.scenario == current[0].name:
            point, judge, started = current
            if judge.record(Outcome.of(rec), time.time() - started):
                self.stop_point(point.name)
        if self.gone.gone(rec) and not self.stop.event.is_set():
            self.stop.fail(f"the server stopped answering ({self.gone.count} requests in {GONE_AFTER_S:g} s or more "
                           "could not connect, none succeeded): continue the run with 'cardgen resume' once it is "
                           "back")

    def settle(self) -> None:
        """Before a point starts, wait for a scrape taken after the last point ended (for at most two scrape
        intervals and a half: a scraper that cannot read /metrics holds nothing up for long). Then a point's window
        on the server's counters, from the last scrape before its first send to the first after its last end
        (:func:`cardgen.analysis.crosscheck.point_windows`), counts its own requests alone: without the wait, the
        scrape before a point's first send often came before the first token of the last request of the point
        before it, and the server's TTFT count over the window held one request more than the point's."""
        if self.scrapes is None or self.last_end is None:
            return
        deadline = time.time() + 2.5 * self.scrape_interval_s
        while not self.stop.event.is_set():
            readings = self.scrapes.read()
            if (readings and readings[-1].t > self.last_end) or time.time() >= deadline:
                return
            time.sleep(min(0.05, self.scrape_interval_s / 4))

    def run_point(self, point: Point, *, attempt: int, judge: Judge, started: Callable[[float], None]) -> Ran:
        self.settle()
        t = time.time()
        self.current = (point, judge, t)
        started(t)
        self.dones.clear()
        try:
            self.assign(point, attempt)
            finished = _wait(self.dones.event, self.stop, check=self.check)
        finally:
            self.current = None
        self.last_end = ended = time.time()
        if not finished:
            return Ran(started_unix=t, ended_unix=ended, cut_off=self.stop.fatal or "interrupted")
        return Ran(started_unix=t, ended_unix=ended,
                   said=[Said(stop=d.stop, detail=d.detail) for d in self.dones.by_node.values()])

    def readings(self, started: float, ended: float) -> Sequence[Reading]:
        return self.scrapes.read() if self.scrapes is not None else []


def _run_points(plan: LoadPlan, outcome: RunOutcome, *, recorder: Recorder, assign: Callable[[Point, int], None],
                stop_point: Callable[[str], None], dones: _Dones, stop: _Stop,
                check: Callable[[], None] | None = None) -> None:
    """Run the plan's points in the controller's order (:func:`cardgen.scenarios.run_points`); report every
    point's outcome (see :class:`LoadPlan`)."""
    interpreter = _LoadInterpreter(plan, recorder=recorder, assign=assign, stop_point=stop_point, dones=dones,
                                   stop=stop, check=check)

    def ended(point: Point, result: PointOutcome) -> None:
        outcome.points.append(result)
        if plan.on_point_end:
            plan.on_point_end(point, result)

    try:
        sequenced = run_points(plan.points, interpreter, attempts=plan.attempts, run_saturated=plan.load.run_saturated,
                               on_start=plan.on_point_start, on_end=ended)
    finally:
        recorder.listeners.remove(interpreter.on_record)
    outcome.interrupted = outcome.interrupted or sequenced.cut_off


def _record(recorder: Recorder, stop: _Stop, record: Callable[[], None], what: str) -> None:
    try:
        record()
    except Exception as exc:  # a record that cannot be written stops the run, loudly
        stop.fail(f"{what} could not be written: {type(exc).__name__}: {one_line(exc)}")


def run_local(plan: LoadPlan, recorder: Recorder) -> RunOutcome:
    stop = _Stop()
    ready, dones = Event(), _Dones(1)

    def on_message(msg: AgentMessage) -> None:
        match msg:
            case Ready():
                ready.set()
            case Done():
                dones.add(msg, "local")
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
    awake = CpusAwake(plan.load.low_latency).open()
    outcome.cpus_awake = awake.words
    stop.install()
    try:
        agent.setup(plan.setup.model_copy(update={"index": 0, "parts": 1}))
        freeze_heap()
        runner.start(1, spawn_rate=1)
        if not _wait(ready, stop):
            outcome.interrupted = True
            return outcome

        def assign(point: Point, attempt: int) -> None:
            agent.assign(Assignment(point=point, index=0, parts=1, attempt=attempt))

        _run_points(plan, outcome, recorder=recorder, assign=assign, stop_point=agent.stop_point, dones=dones,
                    stop=stop)
    finally:
        agent.stop()
        awake.close()
        stop.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
        outcome.fatal = stop.fatal
    return outcome


def _measure_clocks(runner: Any, clients: Sequence[str], pongs: dict[tuple[str, int], clocks.Exchange],
                    arrived: Event, fleet: Fleet) -> None:
    """Each worker's clock against the master's (:mod:`cardgen.load.clocks`), all workers at once, one ping at a
    time each."""

    def exchange(cid: str) -> None:
        missed = 0
        for seq in range(clocks.PINGS):
            arrived.clear()
            messages.send(runner, ClockPing(seq=seq, master_unix=time.time()), client_id=cid)
            deadline = time.time() + clocks.PONG_TIMEOUT_S
            while (cid, seq) not in pongs and time.time() < deadline:
                arrived.wait(timeout=0.05)
            missed = 0 if (cid, seq) in pongs else missed + 1
            if missed >= 2:  # a worker that does not answer (a cardgen before clock pings): its clock unmeasured
                break
        fleet.set_clock(cid, clocks.estimate([e for (c, _), e in pongs.items() if c == cid]))

    gevent.joinall([gevent.spawn(exchange, cid) for cid in clients])


def run_distributed(plan: LoadPlan, recorder: Recorder) -> RunOutcome:
    n = plan.workers
    port = plan.load.master_port or _free_port(plan.load.master_bind)
    env = Environment(user_classes=[CardgenUser], host=plan.url)
    runner = env.create_master_runner(master_bind_host=plan.load.master_bind, master_bind_port=port)
    listening: list[str] = []  # the workers that hear cardgen's messages, in the order they said so
    ready: set[str] = set()
    ready_event = Event()
    dones = _Dones(n)
    stop = _Stop()
    fleet = Fleet()
    pongs: dict[tuple[str, int], clocks.Exchange] = {}
    pong_arrived = Event()
    reached: dict[str, str | None] = {}  # node -> why it cannot reach the server (None: it can)

    def on_listening(msg: Listening, node: str) -> None:
        if node not in listening:
            listening.append(node)
            fleet.joined(node, msg)

    def on_pong(msg: ClockPong, node: str) -> None:
        pongs[(node, msg.seq)] = clocks.Exchange(t0=msg.master_unix, t1=msg.received_unix, t2=msg.sent_unix,
                                                 t3=time.time())
        pong_arrived.set()

    def on_reached(msg: Reached, node: str) -> None:
        reached[node] = msg.error
        fleet.member(node).cpus_awake = msg.cpus_awake

    def on_ready(msg: Ready, node: str) -> None:
        ready.add(node)
        if len(ready) >= n:
            ready_event.set()

    def on_done(msg: Done, node: str) -> None:
        dones.add(msg, node)

    def on_record(msg: Record, node: str) -> None:
        rec = fleet.record(node, msg.record)
        _record(recorder, stop, lambda: recorder.record(rec), "a record")

    def on_loadgen(msg: LoadgenTick, node: str) -> None:
        sample = fleet.sample(node, msg.sample)
        _record(recorder, stop, lambda: recorder.loadgen(sample), "a load-generator sample")

    def on_fatal(msg: Fatal, node: str) -> None:
        stop.fail(f"load worker {msg.worker} could not deliver a record ({msg.error})")

    def on_error(reason: str) -> None:
        stop.fail(f"a message from a load worker was lost ({reason})")

    messages.listen(runner, Listening, on_listening, on_error=on_error)
    messages.listen(runner, ClockPong, on_pong, on_error=on_error)
    messages.listen(runner, Reached, on_reached, on_error=on_error)
    messages.listen(runner, Ready, on_ready, on_error=on_error)
    messages.listen(runner, Done, on_done, on_error=on_error)
    messages.listen(runner, Record, on_record, on_error=on_error)
    messages.listen(runner, LoadgenTick, on_loadgen, on_error=on_error)
    messages.listen(runner, Fatal, on_fatal, on_error=on_error)

    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    outcome = RunOutcome()
    stop.install()
    scratch: tempfile.TemporaryDirectory[str] | None = None
    if plan.run_dir is not None:
        log_dir = RunDir(plan.run_dir)
    else:
        scratch = tempfile.TemporaryDirectory(prefix="cardgen-workers-")
        log_dir = RunDir(scratch.name)

    def last_words(i: int) -> str:
        """A local worker's last line of output, and where the rest is."""
        tail = log_tail(logs[i], 1).strip()
        return f"{tail or 'no output'} (its log: {logs[i]})"

    try:
        if not plan.load.remote_workers:
            env_vars = {**os.environ, "PYTHONUNBUFFERED": "1"}
            for i in range(n):
                logs.append(log_dir.worker_log(str(i)))
                with logs[i].open("ab") as out:  # a file, not a pipe: a chatty worker never blocks on it
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "cardgen.load.worker", "--master-host", plan.load.master_bind,
                         "--master-port", str(port), "--url", plan.url, "--name", f"worker-{i}",
                         "--parent-pid", str(os.getpid())],
                        stdout=out, stderr=subprocess.STDOUT, env=env_vars, start_new_session=True))
        else:
            log.warning("waiting for %d workers: run `cardgen worker --master-host <this host> --master-port %d "
                        "--url %s` on each", n, port, plan.url)
        # a worker is counted once it connects, but hears cardgen's messages only once it says so (Listening):
        # a Setup sent in between would be dropped, and the run would wait for it forever
        deadline = time.time() + WORKER_CONNECT_TIMEOUT_S
        while len(listening) < n:
            if stop.event.is_set():
                outcome.interrupted = True
                return outcome
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    raise RunError(f"a load worker exited at start: {last_words(i)}")
            if time.time() > deadline:
                raise RunError(f"only {len(listening)} of {n} load workers connected within "
                               f"{WORKER_CONNECT_TIMEOUT_S:.0f} s")
            gevent.sleep(0.1)
        clients = listening[:n]
        _measure_clocks(runner, clients, pongs, pong_arrived, fleet)
        for i, cid in enumerate(clients):
            # remote workers keep the name they were started with
            name = None if plan.load.remote_workers else f"worker-{i}"
            messages.send(runner, plan.setup.model_copy(update={"index": i, "parts": n, "name": name,
                                                                "low_latency": plan.load.low_latency}),
                          client_id=cid)
        # before any load: every worker says whether it reaches the server, and one that cannot is named
        reach_by = time.time() + WORKER_CONNECT_TIMEOUT_S
        while len(reached) < n and not stop.event.is_set():
            if time.time() > reach_by:
                silent = ", ".join(fleet.label(c) for c in clients if c not in reached)
                raise RunError(f"load worker(s) {silent} never said whether they reach the server within "
                               f"{WORKER_CONNECT_TIMEOUT_S:.0f} s; no load was sent")
            gevent.sleep(0.05)
        unreachable = [f"load worker {fleet.label(c)} {reached[c]}" for c in clients if reached.get(c)]
        if unreachable:
            raise RunError("; ".join(unreachable) + "; no load was sent")
        runner.start(n, spawn_rate=n)

        def check_workers() -> None:
            if runner.worker_count >= n:
                return
            gone = [last_words(i) for i, p in enumerate(procs) if p.poll() is not None]
            missing = [c for c in clients if (w := runner.clients.get(c)) is None or w.state == STATE_MISSING]
            lost_words = []
            now = time.time()
            for cid in missing:
                why = "it stopped answering the master's heartbeats" + (f" (it said: {gone[0]})" if gone else "")
                lost = fleet.lose(cid, why=why, at=now)

                def record_lost(lost: list[RequestRecord] = lost) -> None:
                    for rec in lost:
                        recorder.record(rec)

                _record(recorder, stop, record_lost, "a lost request's record")
                lost_words.append(f"{fleet.label(cid)} was lost ({why}; its {len(lost)} requests in flight are "
                                  "recorded as lost)")
            point = fleet.point
            if point is not None:  # the workers left finish what they have in flight, within the point
                stop_point(point.name)
                left = [c for c in clients if not fleet.is_lost(c)]
                drain_by = time.time() + DRAIN_S
                while any(c not in dones.by_node for c in left) and time.time() < drain_by:
                    gevent.sleep(0.05)
            stop.fail(f"load worker {'; '.join(lost_words) or '?'}"
                      + (f" during point {point.name}" if point is not None else "")
                      + f", {runner.worker_count} of {n} workers left: records so far are on disk; continue the "
                      "run with 'cardgen resume' (the point runs again from its start)")

        started_by = time.time() + WORKER_CONNECT_TIMEOUT_S

        def check_started() -> None:
            check_workers()
            if time.time() > started_by:
                raise RunError(f"only {len(ready)} of {n} load workers started their users within "
                               f"{WORKER_CONNECT_TIMEOUT_S:.0f} s of the run's start")

        if not _wait(ready_event, stop, check=check_started):
            outcome.interrupted = True
            return outcome

        def assign(point: Point, attempt: int) -> None:
            fleet.point, fleet.attempt = point, attempt
            for i, cid in enumerate(clients):
                messages.send(runner, Assignment(point=point, index=i, parts=n, attempt=attempt), client_id=cid)

        def stop_point(name: str) -> None:
            for cid in clients:
                messages.send(runner, StopPoint(point=name), client_id=cid)

        _run_points(plan, outcome, recorder=recorder, assign=assign, stop_point=stop_point, dones=dones,
                    stop=stop, check=check_workers)
    finally:
        stop.uninstall()
        gevent.spawn(runner.quit).join(timeout=10)
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.returncode not in (0, -signal.SIGTERM):
                outcome.worker_errors.append(f"load worker {i} exited with code {p.returncode}: {last_words(i)}")
        if scratch is not None:
            scratch.cleanup()
        outcome.fatal = stop.fatal
        outcome.workers = fleet.facts(outcome.points)
    return outcome


def run_plan(plan: LoadPlan, recorder: Recorder) -> RunOutcome:
    return run_distributed(plan, recorder) if plan.workers > 0 else run_local(plan, recorder)
