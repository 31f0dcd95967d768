"""The agent: one per load-generating process (the local runner, or each Locust worker).

It owns the process's single Locust user (:class:`CardgenUser`), which executes the process's share of
each point with a pool of greenlets, one ``HttpSession`` per concurrent slot. Records leave through
Locust's ``request`` event; the agent's ``sink`` ships them (to the file locally, to the master from a
worker). It also measures the load generator itself (event-loop lag, CPU, requests in flight).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import psutil
from gevent.pool import Group
from gevent.queue import Queue
from locust import HttpUser, task
from locust.clients import HttpSession
from locust.exception import StopUser

from cardgen.engines import counter, load_gauges
from cardgen.load.client import build_payload, stream_once
from cardgen.load.prompts import PromptTemplate, request_id
from cardgen.points import Point
from cardgen.promtext import parse_metrics
from cardgen.records import LoadgenSample

log = logging.getLogger("cardgen.load")

LAG_TICK_S = 0.05
LAG_REPORT_S = 1.0
SATURATED_USAGE = 0.9


class Agent:
    """Runs this process's share of each point. ``emit(kind, data)`` ships 'record', 'loadgen' and 'done'."""

    def __init__(self, *, worker: str, emit: Callable[[str, dict[str, Any]], None]) -> None:
        self.worker = worker
        self.emit = emit
        self.setup_data: dict[str, Any] | None = None
        self.templates: dict[tuple[str, int], PromptTemplate] = {}
        self.queue: Queue = Queue()
        self.in_flight = 0
        self.stopping = False
        self._user_claimed = False
        self._id_counter = 0
        self._lag_greenlet: gevent.Greenlet | None = None

    # -- set-up ------------------------------------------------------------------------------------------
    def setup(self, data: dict[str, Any]) -> None:
        self.setup_data = data
        self.templates = {
            (endpoint, int(tokens)): PromptTemplate(tokens=int(tokens), text=text)
            for endpoint, by_len in data["templates"].items()
            for tokens, text in by_len.items()
        }
        self.index = int(data.get("index", 0))
        self.parts = int(data.get("parts", 1))
        if self._lag_greenlet is None:
            self._lag_greenlet = gevent.spawn(self._measure_loop)

    def assign(self, point: dict[str, Any], *, index: int, parts: int) -> None:
        self.queue.put((Point.from_wire(point), index, parts))

    # -- the user's task -----------------------------------------------------------------------------------
    def serve(self, user: CardgenUser) -> None:
        """The task of the process's one user: run points as they are assigned, until told to stop."""
        if self._user_claimed:  # Locust gave this process a second user: it has nothing to do
            raise StopUser()
        self._user_claimed = True
        self.emit("ready", {"worker": self.worker})
        while not self.stopping:
            point, index, parts = self.queue.get()
            if point is None:
                break
            started = time.time()
            sent = 0
            try:
                sent = self.run_point(user, point, index=index, parts=parts)
            finally:
                self.emit("done", {"point": point.name, "worker": self.worker, "sent": sent,
                                   "started": started, "ended": time.time()})
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
        watcher = (_SaturationWatcher(ctx.base_url, ctx.headers, ctx.engine)
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
                self.emit("loadgen", sample.model_dump(mode="json"))
                worst = 0.0
                window_start = time.perf_counter()


class _PointContext:
    """Per-point state shared by the point's greenlets in one process."""

    def __init__(self, agent: Agent, user: CardgenUser, point: Point) -> None:
        assert agent.setup_data is not None
        self.agent, self.user, self.point = agent, user, point
        self.issued = 0
        self.base_url = user.host.rstrip("/")
        self.headers = dict(agent.setup_data.get("headers") or {})
        self.engine: str | None = agent.setup_data.get("engine")
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
        agent, point = self.agent, self.point
        setup = agent.setup_data
        assert setup is not None
        n = self.issued
        self.issued += 1
        length = prompt_tokens if prompt_tokens is not None else point.prompt_tokens
        template = agent.templates[(point.endpoint, length)]
        agent._id_counter += 1
        rid = request_id(int(setup["nonce"]), agent.index, agent._id_counter)
        payload = build_payload(endpoint=point.endpoint, model=setup["model"], prompt=template.render(rid),
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
    """Polls ``/metrics`` every 0.25 s during a wave: saturated when requests wait or get preempted."""

    def __init__(self, base_url: str, headers: dict[str, str], engine: str | None) -> None:
        import requests

        self.session = requests.Session()
        self.session.headers.update(headers)
        self.url = f"{base_url}/metrics"
        self.engine = engine
        self.available = True
        self.greenlet: gevent.Greenlet | None = None
        self.saturated = False
        self._preempt0: float | None = None

    def _poll(self) -> dict[str, float]:
        """Waiting requests and KV usage as the engine's adapter reads them, and vLLM's preemption counter."""
        import requests

        try:
            resp = self.session.get(self.url, timeout=2)
            if resp.status_code != 200:
                self.available = False
                return {}
            samples = parse_metrics(resp.text)
        except (requests.RequestException, ValueError):
            self.available = False
            return {}
        gauges = load_gauges(self.engine, samples)
        return {
            "waiting": gauges["waiting"] or 0.0,
            "usage": gauges["usage"] or 0.0,
            "preempted": counter(samples, "vllm:num_preemptions_total") or 0.0,
        }

    def start(self) -> None:
        if not self.available:
            return
        base = self._poll()
        self._preempt0 = base.get("preempted", 0.0)
        self.saturated = False

        def loop() -> None:
            while True:
                gevent.sleep(0.25)
                now = self._poll()
                if not now:
                    return
                # saturated: the server preempts, or requests wait while the KV cache is (nearly) full;
                # a wait alone is normal for a moment while a wave's prompts are being admitted
                if now["preempted"] > (self._preempt0 or 0.0) or (now["waiting"] > 0 and now["usage"] >= SATURATED_USAGE):
                    self.saturated = True

        self.greenlet = gevent.spawn(loop)

    def stop(self) -> bool:
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None
        return self.saturated


class CardgenUser(HttpUser):
    """Locust's user: one per process; its task hands control to the process's :class:`Agent`."""

    host = "http://127.0.0.1"  # replaced by the Environment's host

    def wait_time(self) -> float:  # noqa: D102 - Locust API
        return 0.0

    @task
    def run_assigned_points(self) -> None:
        self.environment.cardgen_agent.serve(self)
