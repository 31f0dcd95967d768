"""The agent: one per load-generating process (the local runner, or each Locust worker).

It owns the process's single Locust user, which executes the process's share of each point with a pool of
greenlets, one ``HttpSession`` per concurrent slot. The user reaches its agent through its class:
:meth:`Agent.user_class` makes a :class:`CardgenUser` subclass bound to this agent. Records leave through
Locust's ``request`` event, whose subscriber is the process's record sink (``cardgen.load.sink``). The agent
also measures the load generator itself (event-loop lag, CPU, requests in flight) until :meth:`Agent.stop`.
Everything else it says goes out as typed messages (``cardgen.load.messages``) through ``send``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

import gevent
import psutil
from gevent.pool import Group
from gevent.queue import Queue
from locust import HttpUser, task
from locust.clients import HttpSession
from locust.exception import StopUser

from cardgen.engines import counter, load_gauges, metric_names
from cardgen.load.client import build_payload, stream_once
from cardgen.load.messages import AgentMessage, Assignment, Done, LoadgenTick, Ready, Setup
from cardgen.load.prompts import PromptTemplate, request_id
from cardgen.points import Point
from cardgen.promtext import parse_metrics
from cardgen.saturation import wave_saturated
from cardgen.schemas.records import LoadgenSample

log = logging.getLogger("cardgen.load")

LAG_TICK_S = 0.05
LAG_REPORT_S = 1.0
USER_CLASS_NAME = "CardgenUser"  # the master spawns users by class name: every agent's class has this one


class Agent:
    """Runs this process's share of each point; ``send`` ships what it says (:data:`AgentMessage`)."""

    def __init__(self, *, worker: str, send: Callable[[AgentMessage], None]) -> None:
        self.worker = worker
        self.send = send
        self.setup_msg: Setup | None = None
        self.templates: dict[tuple[str, int], PromptTemplate] = {}
        self.queue: Queue = Queue()
        self.in_flight = 0
        self.stopping = False
        self.index = 0
        self._user_claimed = False
        self._id_counter = 0
        self._lag_greenlet: gevent.Greenlet | None = None

    def user_class(self) -> type[CardgenUser]:
        """A :class:`CardgenUser` class whose users serve this agent (for this process's Locust Environment)."""

        class AgentUser(CardgenUser):
            agent = self

        AgentUser.__name__ = AgentUser.__qualname__ = USER_CLASS_NAME
        return AgentUser

    # -- set-up ------------------------------------------------------------------------------------------
    def setup(self, setup: Setup) -> None:
        self.setup_msg = setup
        if setup.name:
            self.worker = setup.name
        self.templates = {
            (endpoint, tokens): PromptTemplate(tokens=tokens, text=text)
            for endpoint, by_len in setup.templates.items()
            for tokens, text in by_len.items()
        }
        self.index = setup.index
        if self._lag_greenlet is None:
            self._lag_greenlet = gevent.spawn(self._measure_loop)

    def assign(self, assignment: Assignment) -> None:
        self.queue.put(assignment)

    def stop(self) -> None:
        """Stop taking points and stop measuring: after this the agent sends nothing more (records of requests
        still in flight excepted), so whoever writes what it sends may close."""
        self.stopping = True
        self.queue.put(None)
        if self._lag_greenlet is not None:
            self._lag_greenlet.kill()
            self._lag_greenlet = None

    # -- the user's task -----------------------------------------------------------------------------------
    def serve(self, user: CardgenUser) -> None:
        """The task of the process's one user: run points as they are assigned, until told to stop."""
        if self._user_claimed:  # Locust gave this process a second user: it has nothing to do
            raise StopUser()
        self._user_claimed = True
        self.send(Ready(worker=self.worker))
        while not self.stopping:
            assignment = self.queue.get()
            if assignment is None:
                break
            point = assignment.point
            started = time.time()
            sent = 0
            try:
                sent = self.run_point(user, point, index=assignment.index, parts=assignment.parts)
            finally:
                self.send(Done(point=point.name, worker=self.worker, sent=sent, started_unix=started,
                               ended_unix=time.time()))
        raise StopUser()

    # -- scenario executors ------------------------------------------------------------------------------
    def run_point(self, user: CardgenUser, point: Point, *, index: int, parts: int) -> int:
        runner = {
            "closed": self._closed, "open": self._open, "waves": self._waves, "ingest": self._ingest,
            "batch": self._batch,
        }[point.kind]
        if not point.runs_on(index):
            return 0
        ctx = _PointContext(self, user, point)
        runner(ctx, index=index, parts=parts)
        return ctx.issued

    def _closed(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        slots = point.closed_slots(index, parts)
        quota = point.closed_quota(index, parts)
        t0 = time.time()

        def more() -> bool:
            return not self.stopping and point.closed_continues(issued=ctx.issued, quota=quota,
                                                                elapsed_s=time.time() - t0)

        def slot() -> None:
            session = ctx.session()
            while more():
                ctx.send(session, parallel=point.parallel)

        group = Group()
        for _ in range(slots):
            group.spawn(slot)
        group.join()

    def _open(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        group = Group()
        t0 = time.time() + 0.05
        for offset in point.arrival_offsets(index, parts):
            if self.stopping:
                break
            t = t0 + offset
            delay = t - time.time()
            if delay > 0:
                gevent.sleep(delay)
            group.spawn(ctx.send_fresh, scheduled_at=t, rate_rps=point.rate_rps)
        group.join()

    def _waves(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        watcher = (_SaturationWatcher(ctx.base_url, ctx.headers, ctx.setup.engine)
                   if point.stop_at_saturation else None)
        for wave in point.wave_sizes():
            if self.stopping:
                break
            if watcher:
                watcher.start()
            group = Group()
            for _ in range(wave):
                group.spawn(ctx.send_fresh, wave=wave, parallel=wave)
            group.join()
            if watcher and watcher.stop():
                log.info("waves: the server queued or preempted at wave %d; stopping", wave)
                break

    def _ingest(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        session = ctx.session()
        for length, rep in point.ingest_order():
            if self.stopping:
                return
            ctx.send(session, prompt_tokens=length, repeat=rep, parallel=1)

    def _batch(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        size = point.parallel or 1
        sessions = [ctx.session() for _ in range(size)]
        for repeat, warm in point.batch_rounds():
            if self.stopping:
                return
            group = Group()
            for s in sessions:
                group.spawn(ctx.send, s, repeat=repeat, warmup=warm, parallel=size)
            group.join()

    # -- measuring the load generator -------------------------------------------------------------------
    def _measure_loop(self) -> None:
        proc = psutil.Process()
        proc.cpu_percent(None)
        worst = 0.0
        window_start = time.perf_counter()
        while True:
            t = time.perf_counter()
            gevent.sleep(LAG_TICK_S)
            lag = time.perf_counter() - t - LAG_TICK_S
            worst = max(worst, lag)
            if time.perf_counter() - window_start >= LAG_REPORT_S:
                sample = LoadgenSample(t=time.time(), worker=self.worker, loop_lag_s=max(worst, 0.0),
                                       cpu_percent=proc.cpu_percent(None), in_flight=self.in_flight)
                self.send(LoadgenTick(sample=sample))
                worst = 0.0
                window_start = time.perf_counter()


class _PointContext:
    """Per-point state shared by the point's greenlets in one process."""

    def __init__(self, agent: Agent, user: CardgenUser, point: Point) -> None:
        assert agent.setup_msg is not None, "a point was assigned before the agent's set-up"
        self.agent, self.user, self.point = agent, user, point
        self.setup: Setup = agent.setup_msg
        self.issued = 0
        self.base_url = user.host.rstrip("/")
        self.headers = dict(self.setup.headers)
        self._free: list[HttpSession] = []

    def session(self) -> HttpSession:
        s = HttpSession(base_url=self.base_url, request_event=self.user.environment.events.request, user=self.user)
        s.headers.update(self.headers)
        s.trust_env = False
        return s

    def send_fresh(self, **fields: Any) -> None:
        """Send on a free session (open loop, waves): sessions are reused once their request ends."""
        s = self._free.pop() if self._free else self.session()
        try:
            self.send(s, **fields)
        finally:
            self._free.append(s)

    def send(self, session: HttpSession, *, prompt_tokens: int | None = None, **fields: Any) -> None:
        agent, point, setup = self.agent, self.point, self.setup
        n = self.issued
        self.issued += 1
        length = prompt_tokens if prompt_tokens is not None else point.prompt_tokens
        template = agent.templates[(point.endpoint, length)]
        agent._id_counter += 1
        rid = request_id(setup.nonce, agent.index, agent._id_counter)
        payload = build_payload(endpoint=point.endpoint, model=setup.model, prompt=template.render(rid),
                                output_tokens=point.output_tokens)
        record = {
            "scenario": point.name, "kind": point.kind, "group": point.group, "endpoint": point.endpoint,
            "prompt_tokens_target": template.tokens, "output_tokens_target": point.output_tokens,
            "worker": agent.worker, "index": n, **fields,
        }
        agent.in_flight += 1
        try:
            stream_once(session, endpoint=point.endpoint, payload=payload, record=record,
                        timeout_s=point.timeout_s)
        finally:
            agent.in_flight -= 1


class _SaturationWatcher:
    """Polls ``/metrics`` every 0.25 s during a wave: saturated as :func:`cardgen.saturation.wave_saturated`
    says (a preemption, or requests waiting while the KV cache is nearly full), read through the engine's
    adapter. An engine without a preemption counter is judged on its gauges alone."""

    def __init__(self, base_url: str, headers: dict[str, str], engine: str | None) -> None:
        import requests

        self.session = requests.Session()
        self.session.headers.update(headers)
        self.url = f"{base_url}/metrics"
        self.engine = engine
        self.preemptions_name = metric_names(engine).get("preemptions", "")
        self.available = True
        self.greenlet: gevent.Greenlet | None = None
        self.saturated = False
        self._preempt0: float | None = None

    def _poll(self) -> dict[str, float | None] | None:
        """Waiting requests and KV usage as the engine's adapter reads them, and its preemption counter (None
        where the engine has no such reading); None when ``/metrics`` did not answer."""
        import requests

        try:
            resp = self.session.get(self.url, timeout=2)
            if resp.status_code != 200:
                self.available = False
                return None
            samples = parse_metrics(resp.text)
        except (requests.RequestException, ValueError):
            self.available = False
            return None
        gauges = load_gauges(self.engine, samples)
        return {"waiting": gauges["waiting"], "usage": gauges["usage"],
                "preempted": counter(samples, self.preemptions_name)}

    def start(self) -> None:
        if not self.available:
            return
        base = self._poll()
        self._preempt0 = base["preempted"] if base else None
        self.saturated = False

        def loop() -> None:
            while True:
                gevent.sleep(0.25)
                now = self._poll()
                if now is None:
                    return
                preempted = (now["preempted"] is not None and self._preempt0 is not None
                             and now["preempted"] > self._preempt0)
                if wave_saturated(preempted=preempted, waiting=now["waiting"], kv_usage=now["usage"]):
                    self.saturated = True

        self.greenlet = gevent.spawn(loop)

    def stop(self) -> bool:
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None
        return self.saturated


class CardgenUser(HttpUser):
    """Locust's user: one per process; its task hands control to the process's :class:`Agent`. Only the
    class :meth:`Agent.user_class` makes is bound to an agent; the master's copy (which never runs) is not."""

    host = "http://127.0.0.1"  # replaced by the Environment's host
    agent: ClassVar[Agent | None] = None

    def wait_time(self) -> float:  # noqa: D102 - Locust API
        return 0.0

    @task
    def run_assigned_points(self) -> None:
        if self.agent is None:
            raise RuntimeError("a CardgenUser ran without an agent: use Agent.user_class()")
        self.agent.serve(self)
