"""The agent: one per load-generating process (the local runner, or each Locust worker), the load engine's
interpreter of the scenario programs (:mod:`cardgen.scenarios`) in real time.

It owns the process's single Locust user, which runs the process's share of each point: the point's program
(:func:`cardgen.scenarios.program_for`) says what to send and when, and the agent sends it on gevent, one
keep-alive connection (``cardgen.load.transport``) per user of the program (``slot``), and tells the program what
came back. The user reaches its agent through its class: :meth:`Agent.user_class` makes a :class:`CardgenUser`
subclass bound to this agent. Records leave through Locust's ``request`` event, whose subscriber is the
process's record sink (``cardgen.load.sink``). The agent also measures the load generator itself (event-loop
lag, CPU, requests in flight) until :meth:`Agent.stop`. Everything else it says goes out as typed messages
(``cardgen.load.messages``) through ``send``: its ``Done`` says why the program stopped sending.

What needs every agent's records (a closed loop's precision) is judged at the master, which meets them all
(:mod:`cardgen.load.runner`), and comes back as :meth:`Agent.stop_point`. A program that watches the server
(``Watch`` .. ``EndWatch``) is answered here (:class:`_SaturationWatcher`), by polling its ``/metrics`` meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ClassVar

import gevent
import psutil
import requests
from gevent.pool import Group
from gevent.queue import Queue
from locust import HttpUser, task
from locust.exception import StopUser

from cardgen.engines import counter, get_adapter, load_gauges, metric_names
from cardgen.kinds import kind_of, request_shape
from cardgen.kinds.history import Conversations
from cardgen.kinds.program import Said, Send, Verdict, record_fields
from cardgen.load.alarm import sleep_until
from cardgen.load.client import build_payload, stream_once
from cardgen.load.messages import AgentMessage, Assignment, Done, LoadgenTick, Ready, Setup
from cardgen.load.transport import SENDS, Connection, Target
from cardgen.points import Point
from cardgen.prompts import PromptTemplate, request_id
from cardgen.promtext import parse_metrics
from cardgen.scenarios import Share, WatchState
from cardgen.schemas.records import LoadgenSample, RequestRecord
from cardgen.stops import STOP_INTERRUPTED

log = logging.getLogger("cardgen.load")

LAG_TICK_S = 0.05
SEND_LEAD_S = 0.02  # a timed request's greenlet starts this long before its time, ready to send
START_LEAD_S = 0.05  # a point that starts with timed requests starts this much later: the first is prepared
LAG_REPORT_S = 1.0
USER_CLASS_NAME = "CardgenUser"  # the master spawns users by class name: every agent's class has this one


class Agent:
    """Runs this process's share of each point; ``send`` ships what it says (:data:`AgentMessage`)."""

    def __init__(self, *, worker: str, send: Callable[[AgentMessage], None], url: str | None = None) -> None:
        self.worker = worker
        self.send = send
        # the server's URL as this process reaches it (``cardgen worker --url``: another host may reach the server
        # by another address or path than the master does); None: the Locust environment's, the master's URL
        self.url = url
        self.setup_msg: Setup | None = None
        self.templates: dict[tuple[str, int], PromptTemplate] = {}
        self.queue: Queue[Assignment | None] = Queue()
        self.in_flight = 0
        self.stopping = False
        self.index = 0
        self._user_claimed = False
        self._id_counter = 0
        self._current: _PointContext | None = None
        self._lag_greenlet: gevent.Greenlet[..., None] | None = None

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

    def stop_point(self, point: str) -> None:
        """The master found ``point``'s figures precise (``StopPoint``): its program sends no more."""
        ctx = self._current
        if ctx is not None and ctx.point.name == point:
            ctx.share.told_precise()

    def stop(self) -> None:
        """Stop taking points and stop measuring: after this the agent sends nothing more (records of requests
        still in flight excepted), so whoever writes what it sends may close."""
        self.stopping = True
        self.queue.put(None)
        if self._current is not None:
            self._current.cancel_waiting()
        if self._lag_greenlet is not None:
            self._lag_greenlet.kill()
            self._lag_greenlet = None

    def next_request_id(self) -> str:
        assert self.setup_msg is not None
        self._id_counter += 1
        return request_id(self.setup_msg.nonce, self.index, self._id_counter, self.setup_msg.id_style)

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
            ctx = _PointContext(self, user, point, attempt=assignment.attempt)
            self._current = ctx
            try:
                ctx.run(index=assignment.index, parts=assignment.parts)
            finally:
                self._current = None
                self.send(Done(point=point.name, worker=self.worker, sent=ctx.issued, started_unix=started,
                               ended_unix=time.time(), stop=STOP_INTERRUPTED if self.stopping else ctx.said.stop,
                               detail=ctx.said.detail))
            ctx.close()  # not when the point was cut short: its streams in flight are not to be failed by it
        raise StopUser()

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
    """One point's program in this process, and what its requests need: a connection per user (``slot``) or
    from a pool, the conversations of a chat, the saturation watcher. ``stop`` and ``detail`` say why the
    process stopped sending (``Done``)."""

    def __init__(self, agent: Agent, user: CardgenUser, point: Point, *, attempt: int = 0) -> None:
        assert agent.setup_msg is not None, "a point was assigned before the agent's set-up"
        self.agent, self.user, self.point = agent, user, point
        self.setup: Setup = agent.setup_msg
        self.attempt = attempt
        self.share = Share(point, self)  # its program and requests under way (set per process by run())
        self.t0 = time.time()
        self.issued = 0
        self.said = Said(stop=None)
        # Locust gives a worker's users the master's host with each spawn: a worker's own URL wins
        self.base_url = (agent.url or user.host).rstrip("/")
        self.headers = dict(self.setup.headers)
        self.target = Target.from_url(self.base_url, self.headers)
        self.report = user.environment.events.request.fire
        self.group = Group()
        self.slots: dict[int, Connection] = {}
        self._free: list[Connection] = []
        self._opened: list[Connection] = []
        self.chats: Conversations[dict[str, str]] = Conversations(fresh=kind_of(point).renews_history(point))
        self.shape = request_shape(point)  # what its requests carry beyond a prompt (cardgen.kinds.shape)
        self.watcher: _SaturationWatcher | None = None
        self.waiting: set[gevent.Greenlet[..., object]] = set()  # timed requests not sent yet

    # -- running the program (cardgen.scenarios.runner: this is its IO) -----------------------------------------
    def run(self, *, index: int, parts: int) -> None:
        """Run this process's share of the point: the program's commands until it asks for nothing more and no
        request is under way (or the agent stops)."""
        self.share = Share(self.point, self, index=index, parts=parts)
        first = self.share.start()
        timed = any(isinstance(c, Send) and c.at is not None for c in first)
        self.t0 = time.time() + (START_LEAD_S if timed else 0.0)
        self.share.dispatch(first)
        self.group.join()
        self.said = self.share.said()

    def now(self) -> float:
        """Seconds since the point's start."""
        return time.time() - self.t0

    def send(self, send: Send) -> None:
        """A greenlet of its own for the request: at once, or ``SEND_LEAD_S`` before its time (the alarm then
        wakes it to the microsecond, and the stream reads make way for it: ``SENDS``)."""
        if send.at is None:
            self.group.spawn(self._user, send)
            return
        greenlet: gevent.Greenlet[..., object] = gevent.Greenlet(self._user, send)  # as a Group holds it
        self.group.add(greenlet)
        self.waiting.add(greenlet)
        greenlet.start_later(max(0.0, self.t0 + send.at - SEND_LEAD_S - time.time()))

    def watch(self) -> None:
        if self.watcher is None:
            self.watcher = _SaturationWatcher(self.base_url, self.headers, self.setup.engine, self.share.watch)
        self.watcher.start()

    def end_watch(self) -> Verdict:
        assert self.watcher is not None
        return self.watcher.stop()

    def cancel_waiting(self) -> None:
        """The agent stops: the timed requests that have not left yet never will (those under way finish)."""
        waiting, self.waiting = list(self.waiting), set()
        gevent.killall(waiting, block=False)

    def _user(self, send: Send | None) -> None:
        """Send, tell the program, and send what it asks next on the same user's connection here and now (a
        closed loop's next request leaves without waiting for a new greenlet); the rest the runner dispatches."""
        while send is not None:
            if self.agent.stopping:
                self.share.dropped(send)
                return
            record = self._send_timed(send) if send.at is not None else self.request(send)
            if record is None:
                self.share.dropped(send)
                return
            send = self.share.ended(send, record, keep_slot=True)

    def _send_timed(self, send: Send) -> RequestRecord | None:
        """Prepare the request, then send it at its time: the wait is the last step before the send's clock."""
        at = self.t0 + (send.at or 0.0)
        SENDS.add(at)

        def wait() -> bool:
            try:
                sleep_until(at)
            finally:
                SENDS.remove(at)
            self.waiting.discard(gevent.getcurrent())
            return not self.agent.stopping

        try:
            return self.request(send, wait=wait, scheduled_at=at)
        finally:
            SENDS.remove(at)  # no-op once waited; a request that never reached its wait must not hold reads back

    # -- connections -----------------------------------------------------------------------------------------
    def _connection(self, slot: int | None) -> Connection:
        """The user's own connection (kept alive from request to request), or a free one from the pool."""
        if slot is not None:
            if slot not in self.slots:
                self.slots[slot] = self._open()
            return self.slots[slot]
        return self._free.pop() if self._free else self._open()

    def _open(self) -> Connection:
        conn = Connection(self.target)
        self._opened.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._opened:
            conn.close()
        self._opened.clear()
        self._free.clear()
        self.slots.clear()

    # -- one request -----------------------------------------------------------------------------------------
    def request(self, send: Send, *, wait: Callable[[], bool] | None = None,
                scheduled_at: float | None = None) -> RequestRecord | None:
        """Send one request of the point: its prompt (a sized template, or the point's own sample) marked with a
        fresh request id; a chat turn with its conversation so far. ``wait``: see :func:`stream_once` (None only
        when it said not to send)."""
        agent, point, setup = self.agent, self.point, self.setup
        n = self.issued
        self.issued += 1
        if send.item is not None:  # its own prompts (cardgen.datasets.resolve)
            template = PromptTemplate(tokens=send.prompt_tokens, text=setup.dataset_texts[point.text_key()][send.item])
        else:
            template = agent.templates[(point.endpoint, send.prompt_tokens)]
        prompt = template.render(agent.next_request_id())
        payload = build_payload(endpoint=point.endpoint, model=send.adapter or setup.model, prompt=prompt,
                                output_tokens=send.output_tokens,
                                length_fields=setup.length_fields if send.length_forced else (),
                                extra=setup.cold_fields if point.measures_prefill else None)
        shape = self.shape
        if shape is not None:
            shape.body(point, send, payload)
        chat = send.conversation is not None
        reply: list[str] = []
        if chat:
            payload["messages"] = self.chats.ask(send, {"role": "user", "content": prompt}, renew=self._renew)
        record = record_fields(point, send, worker=agent.worker, index=n, attempt=self.attempt, scheduled_at=scheduled_at)
        conn = self._connection(send.slot)
        agent.in_flight += 1
        try:
            rec = stream_once(conn, endpoint=point.endpoint, payload=payload, record=record,
                              timeout_s=point.timeout_s, report=self.report,
                              on_text=reply.append if chat else None, wait=wait,
                              read=(lambda answer: shape.read(point, send, answer)) if shape is not None else None)
        finally:
            agent.in_flight -= 1
            if send.slot is None:
                self._free.append(conn)
        if chat:
            ok = rec is not None and rec.ok
            self.chats.answered(send, {"role": "assistant", "content": "".join(reply)} if ok else None)
        return rec

    def _renew(self, message: dict[str, str]) -> dict[str, str]:
        """A chat history's first message with a new request id at its head (``fresh_history``)."""
        return {**message, "content": f"{self.agent.next_request_id()} {message['content']}"}


class _SaturationWatcher:
    """Polls ``/metrics`` every 0.25 s while the server is watched and feeds each reading, as the engine's adapter reads it, to
    the share's :class:`~cardgen.scenarios.runner.WatchState` (the one rule of both clocks). An engine without a
    preemption counter is judged on its gauges alone.

    Only while watched: a poll parses the whole exposition on the event loop that stamps chunk arrivals (about
    20 ms for vLLM's), so any other point's gauges are read afterwards from the scraper's file instead
    (``cardgen.load.scraper.ScrapeLog``)."""

    def __init__(self, base_url: str, headers: dict[str, str], engine: str | None, state: WatchState) -> None:
        self.session = requests.Session()
        self.session.headers.update(headers)
        self.url = f"{base_url}/metrics"
        self.engine = engine
        self.preemptions_name = metric_names(engine).get("preemptions", "")
        self.state = state
        state.slot_bound = get_adapter(engine).bounded_by_slots
        self.greenlet: gevent.Greenlet[..., None] | None = None

    def _read(self) -> tuple[float | None, float | None, float | None] | None:
        """The preemption counter, waiting requests and KV usage as the engine's adapter reads them (None where the
        engine has no such reading); None when ``/metrics`` did not answer (the server is then unreadable)."""
        try:
            resp = self.session.get(self.url, timeout=2)
            if resp.status_code != 200:
                self.state.readable = False
                return None
            samples = parse_metrics(resp.text)
        except (requests.RequestException, ValueError):
            self.state.readable = False
            return None
        gauges = load_gauges(self.engine, samples)
        return counter(samples, self.preemptions_name), gauges["waiting"], gauges["usage"]

    def start(self) -> None:
        self.state.begin(None)
        if not self.state.readable:
            return
        base = self._read()
        self.state.begin(base[0] if base else None)

        def loop() -> None:
            while True:
                gevent.sleep(0.25)
                now = self._read()
                if now is None:
                    return
                self.state.reading(preemptions=now[0], waiting=now[1], usage=now[2])

        self.greenlet = gevent.spawn(loop)

    def stop(self) -> Verdict:
        """Stop polling; what the server showed while watched. The preemption counter is read once more (a
        preemption between the last poll and the watch's end still counts)."""
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None
            if self.state.readable and not self.state.saturated and self.state.preempted_at_start is not None:
                last = self._read()
                if last is not None:
                    self.state.reading(preemptions=last[0], waiting=None, usage=None)
        return self.state.verdict()


class CardgenUser(HttpUser):
    """Locust's user: one per process; its task hands control to the process's :class:`Agent`. Only the
    class :meth:`Agent.user_class` makes is bound to an agent; the master's copy (which never runs) is not."""

    host = "http://127.0.0.1"  # replaced by the Environment's host
    agent: ClassVar[Agent | None] = None

    def wait_time(self) -> float:  # Locust API
        return 0.0

    @task
    def run_assigned_points(self) -> None:
        if self.agent is None:
            raise RuntimeError("a CardgenUser ran without an agent: use Agent.user_class()")
        self.agent.serve(self)
