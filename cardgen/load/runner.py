"""Run the points of a suite with Locust: a local runner, or a master with N worker processes.

The master sequences points: it hands each worker its share of a point, waits until every worker says it
is done, then moves on. Records flow back as they finish and are on disk before the next one arrives. What
the processes say to each other are the typed messages of ``cardgen.load.messages``. A record that cannot
reach the disk (the local sink, a worker's sink, the master's recorder) stops the run: the outcome's
``fatal`` says why.

The master is also where every agent's records meet, so it decides what needs all of them:

- a closed-loop point with a ``target_ci`` stops (``StopPoint`` to every agent) once the median speed from
  start and the median TTFT of its steady records are that precise (:mod:`cardgen.precision`), checked once
  per ``parallel`` records after ``min_requests``;
- a closed-loop point saturated the server (:func:`cardgen.saturation.point_saturation`) when the scraper's
  readings during it (:class:`~cardgen.load.scraper.ScrapeLog`) or its median speed say so; waiting requests
  count only when they persist, in at least half of the readings after the first round ended (all users
  start at once, so their prefills queue briefly at the start of every point). The larger counts it skips
  (:meth:`Point.skips_after_saturation`) are not run unless ``run_saturated``;
- every point of the plan ends as a :class:`~cardgen.schemas.run.PointOutcome`: why it stopped (the agents
  say why they stopped sending), its records, its saturation, or why it was skipped.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust.env import Environment

from cardgen.errors import RunError
from cardgen.load import messages
from cardgen.load.agent import Agent, CardgenUser
from cardgen.load.messages import (
    AgentMessage,
    Assignment,
    Done,
    Fatal,
    LoadgenTick,
    Ready,
    Record,
    Setup,
    StopPoint,
)
from cardgen.load.recorder import Recorder
from cardgen.load.scraper import ScrapeLog
from cardgen.load.sink import RecordSink, fault_from_env
from cardgen.points import Point
from cardgen.precision import closed_figures, median_interval, precision_reached
from cardgen.saturation import closed_load_seen, point_saturation
from cardgen.schemas.records import ErrorKind, RequestRecord
from cardgen.schemas.run import (
    STOP_COMPLETE,
    STOP_INTERRUPTED,
    STOP_MAX_DURATION,
    STOP_MAX_REQUESTS,
    STOP_MINIMUM,
    STOP_PRECISION,
    STOP_SATURATED,
    STOP_SKIPPED,
    PointOutcome,
)

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
    attempts: Mapping[str, int] = field(default_factory=dict)  # point name -> the attempt stamped into its
    # records and outcome (``cardgen resume`` reruns a cut-off point as attempt 1, 2...); absent: 0
    run_saturated: bool = False  # run the larger counts a saturated closed-loop point would skip
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
    worker_logs: list[str] = field(default_factory=list)


def freeze_heap() -> None:
    """Leave every object alive now (the imports, the set-up) out of the garbage collector's full passes: with
    Locust, gevent, pydantic and numpy loaded, a full pass took over 100 ms here, a stall of the event loop that
    stamps chunks and sends the open loop's requests. Called once, just before the points run."""
    gc.collect()
    gc.freeze()


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


class _PointWatch:
    """The records of the point under way as they reach the recorder (in distributed mode, every agent's):
    their count, when its first round ended, and whether a closed loop's figures are as precise as its
    ``target_ci`` (then ``on_precise``, once)."""

    def __init__(self, point: Point, *, started: float, on_precise: Callable[[str], None]) -> None:
        self.point, self.started, self.on_precise = point, started, on_precise
        self.parallel = point.parallel or 1
        self.requests = 0
        self.first_round_end: float | None = None
        self.precise = False
        self.evidence: str | None = None  # the intervals when the point was found precise
        self._checked_at = 0
        self.done: list[RequestRecord] = []  # its successful records, in arrival order

    def on_record(self, rec: RequestRecord) -> None:
        point = self.point
        if rec.scenario != point.name:
            return
        self.requests += 1
        if self.requests == self.parallel:
            self.first_round_end = rec.end_at
        if rec.ok:
            self.done.append(rec)
        if (point.kind == "closed" and point.target_ci is not None and not self.precise
                and self.requests >= point.min_requests and self.requests - self._checked_at >= self.parallel
                and time.time() - self.started >= point.min_duration_s):
            self._checked_at = self.requests
            if precision_reached(closed_figures(self.done, parallel=self.parallel), target=point.target_ci, parallel=self.parallel):
                self.precise = True
                self.evidence = self._intervals()
                self.on_precise(point.name)

    def median_speed_tok_s(self) -> float | None:
        """The median speed from start of every successful record (the saturation rule's speed)."""
        speeds = [(r.output_tokens or 0) / (r.end_at - r.sent_at) for r in self.done
                  if r.end_at is not None and r.end_at > r.sent_at]
        return statistics.median(speeds) if speeds else None

    def closed_detail(self, stop: str) -> str:
        """The words behind a closed loop's stop: the intervals reached (with a target), or the minimum."""
        point = self.point
        if point.target_ci is None:
            if stop == STOP_MINIMUM:
                return f"min_requests {point.min_requests}" + (
                    f" and min_duration_s {point.min_duration_s:g}" if point.min_duration_s else "") + " reached"
            return _cap_words(point, stop)
        if stop == STOP_PRECISION and self.evidence is not None:
            return self.evidence
        return f"{_cap_words(point, stop)} first: {self._intervals()}"

    def _intervals(self) -> str:
        speeds, ttfts = closed_figures(self.done, parallel=self.parallel)
        parts = []
        for name, values in (("speed from start", speeds), ("TTFT", ttfts)):
            interval = median_interval(values, parallel=self.parallel)
            parts.append(f"{name} +-{interval.relative:.1%}" if interval is not None else f"{name} not yet known")
        return (f"{', '.join(parts)} over {len(speeds)} steady requests of {self.requests} "
                f"(target +-{self.point.target_ci * 100:g}%)")


def _cap_words(point: Point, stop: str) -> str:
    if stop == STOP_MAX_DURATION:
        return f"max_duration_s {point.max_duration_s:g} reached"
    if stop == STOP_MAX_REQUESTS:
        return f"max_requests {point.max_requests} reached"
    return stop


# the reason a point stopped when its agents say different things: the first of these that any says (an agent
# that had nothing to do says "complete")
_STOP_ORDER = (STOP_INTERRUPTED, STOP_SATURATED, STOP_MAX_DURATION, STOP_MAX_REQUESTS, STOP_PRECISION, STOP_MINIMUM,
               STOP_COMPLETE)


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


def _agents_stop(dones: Sequence[Done]) -> Done | None:
    said = [d for d in dones if d.stop is not None]
    return min(said, key=lambda d: (_STOP_ORDER.index(d.stop) if d.stop in _STOP_ORDER else len(_STOP_ORDER),
                                    d.detail is None), default=None)


def _run_points(plan: RunPlan, outcome: RunOutcome, *, recorder: Recorder, assign: Callable[[Point, int], None],
                stop_point: Callable[[str], None], dones: _Dones, stop: _Stop,
                check: Callable[[], None] | None = None) -> None:
    """Run the plan's points one after another: assign, wait until done (or stopped); skip what a saturated
    point rules out; report every point's outcome (see :class:`RunPlan`)."""
    scrapes = ScrapeLog(plan.server_metrics, plan.setup.engine) if plan.server_metrics is not None else None
    watch: _PointWatch | None = None
    gone = _ServerGone()

    def on_record(rec: RequestRecord) -> None:
        if watch is not None:
            watch.on_record(rec)
        if gone.gone(rec) and not stop.event.is_set():
            stop.fail(f"the server stopped answering ({gone.count} requests in {GONE_AFTER_S:g} s or more could "
                      "not connect, none succeeded): continue the run with 'cardgen resume' once it is back")

    def ended(point: Point, result: PointOutcome) -> None:
        outcome.points.append(result)
        if plan.on_point_end:
            plan.on_point_end(point, result)

    skipped: dict[str, str] = {}
    recorder.listeners.append(on_record)
    try:
        for i, point in enumerate(plan.points):
            attempt = plan.attempts.get(point.name, 0)
            if point.name in skipped:
                ended(point, PointOutcome(name=point.name, kind=point.kind, stop=STOP_SKIPPED,
                                          detail=skipped[point.name], attempt=attempt))
                continue
            started = time.time()
            result = PointOutcome(name=point.name, kind=point.kind, started_unix=started, attempt=attempt)
            if plan.on_point_start:
                plan.on_point_start(point, result)
            watch = _PointWatch(point, started=started, on_precise=stop_point)
            dones.clear()
            try:
                assign(point, attempt)
                finished = _wait(dones.event, stop, check=check)
            except BaseException as exc:
                ended(point, result.model_copy(update={"requests": watch.requests, "stop": STOP_INTERRUPTED,
                                                       "detail": messages.one_line(exc)}))
                raise
            if not finished:
                outcome.interrupted = True
                ended(point, result.model_copy(update={"requests": watch.requests, "stop": STOP_INTERRUPTED,
                                                       "detail": stop.fatal or "interrupted"}))
                return
            result = _point_outcome(point, watch, result, list(dones.by_node.values()), ended_unix=time.time(),
                                    scrapes=scrapes)
            outcome.points_done.append(point.name)
            if result.saturation and point.stop_at_saturation and not plan.run_saturated:
                why = f"not run: the server saturated at {point.parallel or 1} parallel ({result.saturation})"
                for later in plan.points[i + 1:]:
                    if point.skips_after_saturation(later):
                        skipped.setdefault(later.name, why)
            ended(point, result)
    finally:
        watch = None
        recorder.listeners.remove(on_record)


def _point_outcome(point: Point, watch: _PointWatch, started: PointOutcome, dones: list[Done], *,
                   ended_unix: float, scrapes: ScrapeLog | None) -> PointOutcome:
    """How a point that ran ended: why it stopped, in words, its records, and (closed loop) its saturation."""
    said = _agents_stop(dones)
    stop = said.stop if said is not None else STOP_COMPLETE
    detail = said.detail if said is not None else None
    saturation = None
    if point.kind == "closed":
        detail = watch.closed_detail(stop)
        readings = scrapes.read() if scrapes is not None else []
        seen = closed_load_seen(readings, started=started.started_unix or ended_unix, ended=ended_unix,
                                first_round_end=watch.first_round_end,
                                median_speed_tok_s=watch.median_speed_tok_s())
        saturation = point_saturation(seen)  # said beside the stop, which stays why the point stopped sending
    return started.model_copy(update={"ended_unix": ended_unix, "requests": watch.requests, "stop": stop,
                                      "detail": detail, "saturation": saturation})


def _record(recorder: Recorder, stop: _Stop, record: Callable[[], None], what: str) -> None:
    try:
        record()
    except Exception as exc:  # noqa: BLE001 - a record that cannot be written stops the run, loudly
        stop.fail(f"{what} could not be written: {type(exc).__name__}: {messages.one_line(exc)}")


def run_local(plan: RunPlan, recorder: Recorder) -> RunOutcome:
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
    dones = _Dones(n)
    stop = _Stop()

    def on_ready(msg: Ready, node: str) -> None:
        ready.add(node)
        if len(ready) >= n:
            ready_event.set()

    def on_done(msg: Done, node: str) -> None:
        dones.add(msg, node)

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

        def assign(point: Point, attempt: int) -> None:
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
