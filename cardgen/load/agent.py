"""The agent: one per load-generating process (the local runner, or each Locust worker).

It owns the process's single Locust user, which executes the process's share of each point with a pool of
greenlets, one keep-alive connection (``cardgen.load.transport``) per concurrent slot. The user reaches its agent through its class:
:meth:`Agent.user_class` makes a :class:`CardgenUser` subclass bound to this agent. Records leave through
Locust's ``request`` event, whose subscriber is the process's record sink (``cardgen.load.sink``). The agent
also measures the load generator itself (event-loop lag, CPU, requests in flight) until :meth:`Agent.stop`.
Everything else it says goes out as typed messages (``cardgen.load.messages``) through ``send``.

Each executor obeys the point's rules (``cardgen.points``) and says, in its ``Done``, why it stopped sending.
A closed loop stops on precision when the master says so (:meth:`Agent.stop_point`): precision is judged on
the records of every agent, which meet only at the master. Barrier kinds (waves, ingestion, batch) run in one
process, which sees all their records, so they decide here: waves search for the saturating size with the
saturation watcher's verdict per wave, ingestion and batch stop once their interval is within ``target_ci``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, ClassVar

import gevent
import psutil
from gevent.pool import Group
from gevent.queue import Queue
from locust import HttpUser, task
from locust.exception import StopUser

from cardgen.engines import counter, load_gauges, metric_names
from cardgen.load.alarm import sleep_until
from cardgen.load.client import build_payload, stream_once
from cardgen.load.messages import AgentMessage, Assignment, Done, LoadgenTick, Ready, Setup
from cardgen.load.prompts import PromptTemplate, request_id
from cardgen.load.transport import SENDS, Connection, Target
from cardgen.points import Point
from cardgen.precision import (
    MedianInterval,
    batch_precise,
    ingest_interval,
    ingest_precise,
    mean_interval,
    round_decode_speed,
)
from cardgen.promtext import parse_metrics
from cardgen.saturation import wave_saturated
from cardgen.schemas.records import LoadgenSample, RequestRecord
from cardgen.schemas.run import (
    STOP_COMPLETE,
    STOP_INTERRUPTED,
    STOP_PRECISION,
    STOP_SATURATED,
)

log = logging.getLogger("cardgen.load")

LAG_TICK_S = 0.05
SEND_LEAD_S = 0.02  # an open-loop request's greenlet waits this long before its time, ready to send
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
        self._precise: set[str] = set()  # points the master found precise (StopPoint)
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

    def stop_point(self, point: str) -> None:
        """The master found ``point``'s figures precise (``StopPoint``): send no more of its requests."""
        self._precise.add(point)

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
            ctx = _PointContext(self, user, point, attempt=assignment.attempt)
            try:
                self.run_point(ctx, index=assignment.index, parts=assignment.parts)
            finally:
                self.send(Done(point=point.name, worker=self.worker, sent=ctx.issued, started_unix=started,
                               ended_unix=time.time(), stop=STOP_INTERRUPTED if self.stopping else ctx.stop,
                               detail=ctx.detail))
            ctx.close()  # not when the point was cut short: its streams in flight are not to be failed by it
        raise StopUser()

    # -- scenario executors ------------------------------------------------------------------------------
    def run_point(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Run this process's share of ``ctx.point``; ``ctx.stop`` and ``ctx.detail`` then say why it stopped."""
        runner = {
            "closed": self._closed, "open": self._open, "waves": self._waves, "ingest": self._ingest,
            "batch": self._batch, "prefix": self._prefix, "chat": self._chat,
        }[ctx.point.kind]
        if not ctx.point.runs_on(index):
            ctx.stop = STOP_COMPLETE
            return
        runner(ctx, index=index, parts=parts)

    def _closed(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        point = ctx.point
        slots = point.closed_slots(index, parts)
        quota = point.closed_quota(index, parts)
        cap = point.closed_cap(index, parts)
        t0 = time.time()

        def more() -> bool:
            if ctx.stop is not None:
                return False
            if self.stopping:
                ctx.stop = STOP_INTERRUPTED
                return False
            elapsed = time.time() - t0
            precise = point.name in self._precise
            if point.closed_continues(issued=ctx.issued, quota=quota, elapsed_s=elapsed, cap=cap, precise=precise):
                return True
            ctx.stop, _ = point.closed_stop(issued=ctx.issued, cap=cap, elapsed_s=elapsed, precise=precise)
            return False

        def slot() -> None:
            session = ctx.session()
            while more():
                ctx.send(session, parallel=point.parallel)

        group = Group()
        for _ in range(slots):
            group.spawn(slot)
        group.join()

    def _open(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Each request's greenlet is spawned ``SEND_LEAD_S`` before its scheduled time and sleeps until then
        (``cardgen.load.alarm``, to the microsecond): the alarm switches straight into it, so it leaves without
        waiting for a spawn, and the stream reads make way for it (``SENDS``)."""
        point = ctx.point
        group = Group()
        t0 = time.time() + 0.05
        numbers = point.request_numbers(index, parts)
        for number, offset in zip(numbers, point.arrival_offsets(index, parts), strict=True):
            if self.stopping:
                break
            t = t0 + offset
            delay = t - SEND_LEAD_S - time.time()
            if delay > 0:
                gevent.sleep(delay)
            item = {"item": number} if point.dataset is not None else {}
            SENDS.add(t)
            group.spawn(self._send_at, ctx, t, rate_rps=point.rate_rps, **item)
        group.join()
        ctx.stop = STOP_COMPLETE

    def _send_at(self, ctx: _PointContext, at: float, **fields: Any) -> None:
        """Prepare the request, then send it at ``at``: the wait is the last step before the send's clock."""

        def wait() -> bool:
            try:
                sleep_until(at)
            finally:
                SENDS.remove(at)
            return not self.stopping

        try:
            ctx.send_fresh(scheduled_at=at, wait=wait, **fields)
        finally:
            SENDS.remove(at)  # no-op once waited; a request that never reached its wait must not hold reads back

    def _waves(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Waves of requests sent at once: :meth:`Point.wave_search` (``search: bisect``) told after each wave
        whether it saturated the server, or :meth:`Point.wave_sizes` (``step``) until one saturates."""
        point = ctx.point
        search = point.wave_search() if point.search == "bisect" else None
        watcher = (_SaturationWatcher(ctx.base_url, ctx.headers, ctx.setup.engine)
                   if search is not None or point.stop_at_saturation else None)
        sizes = iter(point.wave_sizes())
        calm, saturating = 0, None  # the largest wave seen calm, the saturating one (step)
        while not self.stopping:
            wave = search.next_size() if search is not None else next(sizes, None)
            if wave is None:
                break
            if watcher:
                watcher.start()
            group = Group()
            for _ in range(wave):
                group.spawn(ctx.send_fresh, wave=wave, parallel=wave)
            group.join()
            saturated = watcher.stop() if watcher else False
            if search is not None:
                search.report(wave, saturated)
            elif saturated and point.stop_at_saturation:
                saturating = wave
                log.info("waves: the server queued or preempted at wave %d; stopping", wave)
                break
            elif not saturated:
                calm = wave
        if search is not None and search.bracketed:
            ctx.stop = STOP_SATURATED
            ctx.detail = f"between waves of {search.low} and {search.high}"
        elif saturating is not None:
            ctx.stop = STOP_SATURATED
            ctx.detail = f"wave of {saturating}"
        else:
            ctx.stop = STOP_COMPLETE
            largest = search.low if search is not None else calm
            if watcher is None:
                ctx.detail = "saturation not watched"
            elif not watcher.available:
                ctx.detail = "saturation unknown: the server's /metrics did not answer"
            else:
                ctx.detail = f"no wave up to {largest} saturated the server"

    def _ingest(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """One prompt at a time in :meth:`Point.ingest_order`; with a ``target_ci``, after each full sweep
        stop once the slope of TTFT on prompt tokens is that precise (``repeats`` is then the most sweeps)."""
        point = ctx.point
        session = ctx.session()
        sweep = len(point.lengths)
        sent: list[RequestRecord] = []
        for n, (length, rep) in enumerate(point.ingest_order(), start=1):
            if self.stopping:
                return
            sent.append(ctx.send(session, prompt_tokens=length, repeat=rep, parallel=1))
            if point.target_ci is not None and sweep and n % sweep == 0:
                interval = ingest_interval(sent)
                precise = ingest_precise(sent, target=point.target_ci)
                ctx.detail = _interval_words("the slope", interval, point.target_ci, f"{n // sweep} sweeps")
                if not point.more_sweeps(n // sweep, precise=precise):
                    ctx.stop = STOP_PRECISION if precise else STOP_COMPLETE
                    return
        ctx.stop = STOP_COMPLETE

    def _prefix(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Shared prefixes, one request at a time in :meth:`Point.prefix_order`: a cold pass, then warm ones."""
        session = ctx.session()
        for n, (prefix, phase) in enumerate(ctx.point.prefix_order()):
            if ctx.point.pause_before(n):
                gevent.sleep(ctx.point.pause_before(n))
            if self.stopping:
                return
            ctx.send(session, item=prefix, prefix=prefix, phase=phase, parallel=1)
        ctx.stop = STOP_COMPLETE

    def _chat(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Each user holds its conversations (:meth:`Point.chat_conversations`) one after another: every turn
        sends the history with the model's own replies and a new message, then waits ``think_time_s``."""
        point = ctx.point

        def user(slot: int) -> None:
            session = ctx.session()
            for conversation in point.chat_conversations(slot):
                history: list[dict[str, str]] = []
                for turn in range(1, point.turns + 1):
                    if self.stopping:
                        return
                    message: list[str] = []
                    reply: list[str] = []
                    if point.fresh_history and history:  # a new id at the head: no prefix the server saw
                        self._id_counter += 1
                        fresh = request_id(ctx.setup.nonce, self.index, self._id_counter)
                        history = [{**history[0], "content": f"{fresh} {history[0]['content']}"}, *history[1:]]
                    rec = ctx.send(session, prompt_tokens=point.chat_message_tokens(turn), history=history,
                                   on_prompt=message.append, on_text=reply.append, conversation=conversation,
                                   turn=turn, parallel=point.parallel)
                    if not rec.ok:
                        break  # the conversation cannot go on without its reply
                    history = [*history, {"role": "user", "content": message[0]},
                               {"role": "assistant", "content": "".join(reply)}]
                    if turn < point.turns and point.think_time_s:
                        gevent.sleep(point.think_time_s)

        group = Group()
        for slot in range(point.parallel or 1):
            group.spawn(user, slot)
        group.join()
        ctx.stop = STOP_COMPLETE

    def _batch(self, ctx: _PointContext, *, index: int, parts: int) -> None:
        """Rounds of ``parallel`` simultaneous requests (:meth:`Point.batch_rounds`); with a ``target_ci``,
        more measured rounds after them until the mean decode speed of a round is that precise, at most
        ``max_runs``."""
        point = ctx.point
        size = point.parallel or 1
        sessions = [ctx.session() for _ in range(size)]
        speeds: list[float] = []  # each measured round's mean decode speed

        def one_round(repeat: int, warm: bool) -> None:
            group = Group()
            greenlets = [group.spawn(ctx.send, s, repeat=repeat, warmup=warm, parallel=size) for s in sessions]
            group.join()
            if not warm:
                speed = round_decode_speed([g.value for g in greenlets if g.value is not None])
                speeds.append(math.nan if speed is None else speed)

        for repeat, warm in point.batch_rounds():
            if self.stopping:
                return
            one_round(repeat, warm)
        if point.target_ci is None:
            ctx.stop = STOP_COMPLETE
            return
        while True:
            interval = mean_interval(speeds)
            precise = batch_precise(speeds, target=point.target_ci)
            ctx.detail = _interval_words("the mean decode speed", interval, point.target_ci,
                                         f"{len(speeds)} rounds")
            if not point.more_batch_rounds(len(speeds), precise=precise):
                ctx.stop = STOP_PRECISION if precise else STOP_COMPLETE
                return
            if self.stopping:
                return
            one_round(len(speeds), False)

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


def _interval_words(figure: str, interval: MedianInterval | None, target: float, over: str) -> str:
    if interval is None:
        return f"{figure}: no interval yet after {over} (target +-{target * 100:g}%)"
    return f"{figure} +-{interval.relative:.1%} after {over} (target +-{target * 100:g}%)"


class _PointContext:
    """Per-point state shared by the point's greenlets in one process; ``stop`` and ``detail`` say why the
    process stopped sending (``Done``)."""

    def __init__(self, agent: Agent, user: CardgenUser, point: Point, *, attempt: int = 0) -> None:
        assert agent.setup_msg is not None, "a point was assigned before the agent's set-up"
        self.agent, self.user, self.point = agent, user, point
        self.setup: Setup = agent.setup_msg
        self.attempt = attempt
        self.issued = 0
        self.stop: str | None = None
        self.detail: str | None = None
        self.base_url = user.host.rstrip("/")
        self.headers = dict(self.setup.headers)
        self.target = Target.from_url(self.base_url, self.headers)
        self.report = user.environment.events.request.fire
        self._free: list[Connection] = []
        self._opened: list[Connection] = []

    def session(self) -> Connection:
        """A connection of its own for one slot (kept alive from request to request)."""
        conn = Connection(self.target)
        self._opened.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._opened:
            conn.close()
        self._opened.clear()
        self._free.clear()

    def send_fresh(self, **fields: Any) -> RequestRecord | None:
        """Send on a free session (open loop, waves): sessions are reused once their request ends."""
        s = self._free.pop() if self._free else self.session()
        try:
            return self.send(s, **fields)
        finally:
            self._free.append(s)

    def send(self, session: Connection, *, prompt_tokens: int | None = None,
             history: list[dict[str, str]] | None = None, on_prompt: Callable[[str], None] | None = None,
             on_text: Callable[[str], None] | None = None, wait: Callable[[], bool] | None = None,
             **fields: Any) -> RequestRecord | None:
        """Send one request of the point; a chat turn passes its ``history`` (the new message is this request's
        prompt, after it), and ``on_prompt`` / ``on_text`` to receive its message and the reply. ``wait``: see
        :func:`stream_once` (None only when it said not to send)."""
        agent, point, setup = self.agent, self.point, self.setup
        n = self.issued
        self.issued += 1
        output_tokens = point.output_tokens
        if point.dataset is not None or point.kind == "prefix":  # its own prompts (cardgen.datasets.resolve)
            number = fields["item"]
            length, output_tokens = point.item_lengths(number)
            template = PromptTemplate(tokens=length, text=setup.dataset_texts[point.text_key()][number])
        else:
            length = prompt_tokens if prompt_tokens is not None else point.prompt_tokens
            template = agent.templates[(point.endpoint, length)]
        agent._id_counter += 1
        rid = request_id(setup.nonce, agent.index, agent._id_counter)
        prompt = template.render(rid)
        if on_prompt is not None:
            on_prompt(prompt)
        payload = build_payload(endpoint=point.endpoint, model=setup.model, prompt=prompt,
                                output_tokens=output_tokens)
        if history is not None:
            payload["messages"] = [*history, {"role": "user", "content": prompt}]
        record = {
            "scenario": point.name, "kind": point.kind, "group": point.group, "endpoint": point.endpoint,
            "prompt_tokens_target": template.tokens, "output_tokens_target": output_tokens,
            "worker": agent.worker, "index": n, "attempt": self.attempt, **fields,
        }
        agent.in_flight += 1
        try:
            return stream_once(session, endpoint=point.endpoint, payload=payload, record=record,
                               timeout_s=point.timeout_s, report=self.report, on_text=on_text, wait=wait)
        finally:
            agent.in_flight -= 1


class _SaturationWatcher:
    """Polls ``/metrics`` every 0.25 s during a wave: saturated as :func:`cardgen.saturation.wave_saturated`
    says (a preemption, or requests waiting while the KV cache is nearly full), read through the engine's
    adapter. An engine without a preemption counter is judged on its gauges alone.

    Waves only: a poll parses the whole exposition on the event loop that stamps chunk arrivals (about 20 ms
    for vLLM's), so a closed-loop point's gauges are read afterwards from the scraper's file instead
    (``cardgen.load.scraper.ScrapeLog``)."""

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
        self.saturated = False
        if not self.available:
            return
        base = self._poll()
        self._preempt0 = base["preempted"] if base else None

        def loop() -> None:
            while True:
                gevent.sleep(0.25)
                now = self._poll()
                if now is None:
                    return
                self._judge(now)

        self.greenlet = gevent.spawn(loop)

    def _judge(self, now: dict[str, float | None]) -> None:
        preempted = (now["preempted"] is not None and self._preempt0 is not None
                     and now["preempted"] > self._preempt0)
        if wave_saturated(preempted=preempted, waiting=now["waiting"], kv_usage=now["usage"]):
            self.saturated = True

    def stop(self) -> bool:
        """Stop polling; whether the wave saturated the server. The preemption counter is read once more
        (a preemption between the last poll and the wave's end still counts)."""
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None
            if self.available and not self.saturated and self._preempt0 is not None:
                last = self._poll()
                if last is not None and last["preempted"] is not None and last["preempted"] > self._preempt0:
                    self.saturated = True
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
