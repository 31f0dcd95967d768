"""The virtual-time driver: a suite's points run on one :class:`~cardgen.sim.virtual.VirtualServer` on a
virtual clock, with no sleeping and no sockets: the second interpreter of the scenario programs
(:mod:`cardgen.scenarios`), the load engine being the first.

The controller (:func:`cardgen.scenarios.run_points`) sequences the points, as it does for the load engine;
this module runs each point's program: a :class:`~cardgen.scenarios.Send` leaves at its time, crosses the
network, is served by the virtual server step by step, and its record (send time, headers, every chunk's
arrival, usage) goes to the point's judge, then to the program as ``ended``. A ``Watch`` reads the server at
every step until ``EndWatch``, by the rule of the load engine's watcher (:func:`cardgen.saturation.watched_saturated`).
The server's own ``/metrics`` (:class:`~cardgen.sim.metrics.SimMetrics`) is scraped every
``scrape_interval_s``, from before the first request to after the last, as a real run's scraper does; those
readings are what the controller judges a closed loop's saturation on.

:func:`drive` hands each point's outcome, with the requests and scrapes so far, to ``on_point_end`` as the point
ends: :func:`cardgen.sim.modelled.modelled_run` writes them there (with the ``run.json`` a probe of the virtual
server would fill, :func:`probe_answer`), the one assembler of a modelled run. Every time is anchored at
``start_unix``, and every draw is seeded: the same arguments give the same records.

Between the load generator and the server sits a network of ``network_s`` each way, plus up to
``read_jitter_s`` on each chunk's read; ``step_jitter`` makes each step's duration vary by that relative
standard deviation. All three are 0 by default: the records are then the model's exact times.

    >>> from cardgen.points import expand
    >>> from cardgen.sim.config import SimConfig
    >>> from cardgen.suite import parse_suite
    >>> suite = parse_suite("name: x\\nscenarios:\\n  - kind: ingest\\n    prompt_tokens: [16, 64, 256]\\n", source="x")
    >>> run = drive(expand(suite), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"))
    >>> [(p.name, p.requests) for p in run.points]
    [('ingest', 3)]
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from cardgen.datasets import resolve
from cardgen.engines import get_adapter
from cardgen.kinds import kind_of, request_shape
from cardgen.kinds.history import Conversations
from cardgen.kinds.program import Judge, Said, Send, Verdict, record_fields
from cardgen.kinds.shape import NO_COST, VirtualCost
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.saturation import Reading
from cardgen.scenarios import Ran, Share, run_points
from cardgen.schemas import ErrorKind, MetricSample, PointOutcome, RequestRecord, ServerInfo
from cardgen.schemas.records import EngineTimings
from cardgen.sim import tokenizer
from cardgen.sim.answers import ENGINE_NAME, describe, models_answer, version_answer
from cardgen.sim.config import SimConfig, build_perf, cache_config_labels, max_model_len
from cardgen.sim.interrupts import HEARD
from cardgen.sim.metrics import Scraped, SimMetrics
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.reasoning import thinking
from cardgen.sim.scheduler import Scheduler, block_hashes
from cardgen.sim.tokenizer import CHAT_MESSAGE_OVERHEAD, CHAT_REPLY_OVERHEAD
from cardgen.sim.validate import error_body
from cardgen.sim.virtual import VirtualRequest, VirtualServer
from cardgen.stops import STOP_SKIPPED

T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z: the default start, so that a virtual run is reproducible
URL = "http://127.0.0.1:8000"  # where the virtual server would listen
SCRAPE_S = 0.001  # how long one scrape of /metrics takes
CHAT_OVERHEAD = CHAT_MESSAGE_OVERHEAD + CHAT_REPLY_OVERHEAD  # a one-message conversation's tokens beyond its words


@dataclass(frozen=True, kw_only=True)
class DriveOptions:
    """How a virtual run is timed, and what sits between the load generator and the server."""

    start_unix: float = T0  # the first scrape; every time of the run follows from it
    seed: int = 0  # response ids, read jitter and step jitter
    network_s: float = 0.0  # one-way delay between the load generator and the server
    read_jitter_s: float = 0.0  # extra delay of each chunk's read: uniform in [0, read_jitter_s), never reordering
    step_jitter: float = 0.0  # relative standard deviation of each step's duration (0: the model's exact time)
    lead_s: float = 0.5  # from the first scrape to the first point
    pause_s: float = 0.5  # between points (at least a scrape interval, so that a scrape falls between points)
    scrape_interval_s: float = 0.5  # how often /metrics is read, for server_metrics.jsonl and saturation
    scrapes: bool = True  # keep every scrape (server_metrics.jsonl); off when only the timing matters (a plan)
    processes: int = 1  # load-generating processes a point's programs are split over (as --workers N splits them)

    def described(self) -> dict[str, float | int]:
        """What run.json's ``sim.drive`` says of how the run was timed."""
        return {"network_s": self.network_s, "read_jitter_s": self.read_jitter_s, "step_jitter": self.step_jitter,
                "seed": self.seed, "processes": self.processes}

    def __post_init__(self) -> None:
        if min(self.network_s, self.read_jitter_s, self.step_jitter, self.lead_s, self.pause_s) < 0:
            raise ValueError("delays, jitters and pauses must not be negative")
        if self.scrape_interval_s <= 0:
            raise ValueError("scrape_interval_s must be positive")
        if self.processes < 1:
            raise ValueError("processes must be at least 1")


@dataclass
class PointRun:
    """One point as the driver ran it, or why it did not."""

    name: str
    kind: str
    started_unix: float | None = None
    ended_unix: float | None = None
    requests: int = 0
    failed: int = 0
    output_tokens: int = 0
    sizes: list[int] = field(default_factory=list)  # the size of each group of requests it sent at once, in order
    saturated: str | None = None  # why it saturated the server (what its program, or the controller, said)
    skipped: str | None = None  # why it was not run
    stop: str | None = None  # why it stopped: one of cardgen.schemas.run's STOP_* reasons
    detail: str | None = None  # the words behind ``stop``
    attempt: int = 0

    def outcome(self) -> PointOutcome:
        """What ``run.json`` says of the point."""
        return PointOutcome(name=self.name, kind=self.kind, started_unix=self.started_unix,
                            ended_unix=self.ended_unix, requests=self.requests, stop=self.stop, detail=self.detail,
                            saturation=self.saturated if kind_of(self).watch_saturation else None, attempt=self.attempt)

    @property
    def duration_s(self) -> float:
        """Seconds from its first send to its last request's end (0 when not run)."""
        if self.started_unix is None or self.ended_unix is None:
            return 0.0
        return self.ended_unix - self.started_unix


@dataclass(frozen=True)
class DrivenRequest:
    """One request from both sides: what the load engine records, and what the server did (None when a fault
    answered it at once)."""

    record: RequestRecord
    served: VirtualRequest | None


class DriveSink(Protocol):
    """Where a streamed run's requests and scrapes go as they happen (:func:`drive`'s ``sink``): the driver keeps
    none of them, so that its memory is what is in flight, not what has run."""

    def request(self, driven: DrivenRequest) -> None:
        """A request ended (in the order they end, as ``requests.jsonl`` holds them)."""

    def scrape(self, scraped: Scraped) -> None:
        """A scrape of ``/metrics``, with its line of ``server_metrics.jsonl``."""


@dataclass
class Drive:
    """A virtual run: its points, its requests in the order they ended (as ``requests.jsonl`` holds them) and
    its scrapes of ``/metrics`` (none of either when they were streamed to a sink)."""

    points: list[PointRun]
    requests: list[DrivenRequest]
    scrapes: list[MetricSample]
    started_unix: float
    ended_unix: float
    server: VirtualServer

    @property
    def records(self) -> list[RequestRecord]:
        return [r.record for r in self.requests]

    @property
    def seconds(self) -> float:
        """From the first scrape to the last."""
        return self.ended_unix - self.started_unix

    @property
    def preemptions(self) -> int:
        return self.server.scheduler.num_preemptions


# --- the clock, the network and the server -------------------------------------------------------------------


class _Jitter:
    """A PerfModel whose step durations vary around ``perf``'s by a seeded relative standard deviation."""

    def __init__(self, perf: PerfModel, rel: float, seed: int) -> None:
        self.perf, self.rel = perf, rel
        self.rng = random.Random(f"steps:{seed}")
        self._gauss = self.rng.gauss
        self.kv_capacity_tokens = perf.kv_capacity_tokens
        self.block_size = perf.block_size
        self.max_num_seqs = perf.max_num_seqs
        self.max_num_batched_tokens = perf.max_num_batched_tokens
        self._uniform = getattr(perf, "uniform_decode_s", None)  # perf's shortcuts, where it has them
        self._summed = getattr(perf, "summed_step_s", None)

    def _factor(self) -> float:
        """The next step's duration relative to the model's (one draw)."""
        return max(0.5, 1.0 + self.rel * self._gauss(0.0, 1.0))

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        return self.perf.step_time_s(prefill, decode) * self._factor()

    def uniform_decode_s(self, seqs: int, context: int) -> float | None:
        """``perf``'s time of a step that only decodes (None where it has none), jittered as a step is."""
        uniform = self._uniform
        base = uniform(seqs, context) if uniform is not None else None
        return None if base is None else base * self._factor()

    def summed_step_s(self, tokens: int, seqs: int, pairs: int, cached: int) -> float | None:
        """``perf``'s time of a step from its sums (None where it has none), jittered as a step is."""
        summed = self._summed
        base = summed(tokens, seqs, pairs, cached) if summed is not None else None
        return None if base is None else base * self._factor()

    @property
    def vision(self) -> Any:
        """The vision encoder ``perf`` models a request's images with (None: it models none)."""
        return getattr(self.perf, "vision", None)

    def encode_time_s(self, flops: float) -> float:
        """Encoder work's time, as ``perf`` times it (jittered as a step is)."""
        encode = getattr(self.perf, "encode_time_s", None)
        if encode is None:
            raise ValueError(f"the performance model ({type(self.perf).__name__}) does not model an encoder's work")
        return float(encode(flops)) * self._factor()

    def draft_time_s(self, decode: list[SeqWork], tokens: int) -> float:
        """A draft head's time, as ``perf`` models it (none when it models none: drafts cost nothing)."""
        draft = getattr(self.perf, "draft_time_s", None)
        return float(draft(decode, tokens)) if draft is not None else 0.0

    def describe(self) -> dict[str, object]:
        return self.perf.describe()


class _Clock:
    """The virtual clock: client events, the server's steps and the scrapes of its ``/metrics``, in time
    order."""

    def __init__(self, server: VirtualServer, metrics: SimMetrics | None, options: DriveOptions,
                 sink: DriveSink | None = None) -> None:
        self.server, self.metrics, self.opts, self.sink = server, metrics, options, sink
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.next_scrape = options.start_unix
        self.scrapes: list[MetricSample] = []
        self.readings: list[Reading] = []  # every scrape's gauges, for the saturation rule
        self.on_step: Callable[[float], None] | None = None  # told the KV usage as each step starts (while watched)
        self.delivered: Callable[[VirtualRequest], None] = lambda served: None

    def at(self, t: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (t, next(self.order), action))

    def run_until(self, done: Callable[[], bool]) -> None:
        """Process client events, steps and scrapes in time order until ``done()``. Ties: a scrape first, then
        client events (a request that arrives as a step ends joins the next step), then the step's end."""
        srv, heard = self.server, HEARD
        blocked = False  # requests wait for blocks only a later event can free
        while not done():
            if heard.noted:  # a Ctrl-C (interrupts.at_safe_points): taken here, between two events
                heard.raise_noted()
            t_event = self.events[0][0] if self.events else math.inf
            if srv.in_flight is None and srv.has_work and not blocked and t_event > srv.now:
                # the steps that only decode before the next event or scrape, at once (the same as one by one)
                in_flight, finished = srv.decode_run(min(t_event, self.next_scrape), self.on_step)
                for served in finished:  # their chunks on their way before anything else happens at their end
                    self.delivered(served)
                if in_flight or finished:
                    continue
                if srv.start_step() is None:
                    blocked = True
                elif self.on_step is not None:
                    self.on_step(srv.scheduler.kv_usage)
                continue
            t_step = srv.in_flight.end_s if srv.in_flight is not None else math.inf
            t = min(t_event, t_step)
            if t == math.inf:
                raise RuntimeError("the virtual run is stuck: requests wait and nothing will free the KV cache")
            if self.next_scrape <= t:
                self.scrape()
            elif t_event <= t_step:
                heapq.heappop(self.events)[2]()
                blocked = False
            else:
                for served in srv.finish_step():
                    self.delivered(served)

    def scrape(self) -> None:
        t = self.next_scrape
        sched = self.server.scheduler
        self.readings.append(Reading(t=t, usage=sched.kv_usage, waiting=len(sched.waiting),
                                     preemptions=sched.num_preemptions))
        if self.opts.scrapes and self.metrics is not None and self.sink is not None:
            self.sink.scrape(self.metrics.scrape(sched, t=t, t_end=t + SCRAPE_S))
        elif self.opts.scrapes and self.metrics is not None:
            # built, not parsed: the samples are the virtual server's own, already in the saved shape
            self.scrapes.append(MetricSample.model_construct(t=t, t_end=t + SCRAPE_S,
                                                             samples=self.metrics.samples(sched)))
        self.next_scrape = t + self.opts.scrape_interval_s

    def scrape_until(self, t: float) -> None:
        """Scrape an idle server up to ``t``."""
        while self.next_scrape <= t:
            self.scrape()


# --- one point: its program's requests on the virtual server ------------------------------------------------


@dataclass(eq=False)
class _Request:
    """One request on the client's side while it is under way."""

    run: _PointRun
    send: Send
    fields: dict[str, Any]  # the RequestRecord fields the point and the send fix (cardgen.scenarios.record_fields)
    sent: float
    prompt_tokens: int  # as the server counts them (a chat turn: its whole conversation)
    block_hashes: tuple[int, ...] = ()
    cost: VirtualCost = NO_COST  # what its kind's shape says it costs beyond its text (cardgen.kinds.shape)


@dataclass(eq=False)
class _PointRun:
    """One process's share of a point on the virtual clock: the :class:`~cardgen.scenarios.runner.IO` its
    :class:`~cardgen.scenarios.Share` runs on (sending at a time, reading the server at every step while it is
    watched, the clock), and what its requests need."""

    interpreter: VirtualInterpreter
    point: Point
    judge: Judge
    attempt: int
    t0: float
    index: int = 0
    parts: int = 1
    worker: str = "local"
    shares: list[Share] = field(default_factory=list)  # every process's share of the point
    issued: int = 0
    clock_now: float = 0.0  # the virtual time of the event being handled (Unix seconds)
    last_end: float | None = None  # the latest end of its requests so far
    chats: Conversations[tuple[str, int]] = field(init=False)  # (role, words) messages

    def __post_init__(self) -> None:
        self.chats = Conversations(fresh=kind_of(self.point).renews_history(self.point))
        self.share = Share(self.point, self, index=self.index, parts=self.parts)
        self.clock_now = self.t0

    @property
    def idle(self) -> bool:
        return self.share.idle

    # -- the share's IO ------------------------------------------------------------------------------------------
    def send(self, send: Send) -> None:
        self.interpreter._send(self, send, self.clock_now if send.at is None else self.t0 + send.at)

    def watch(self) -> None:
        self.share.watch.begin(self.interpreter.clock.server.scheduler.num_preemptions)
        self.interpreter.clock.on_step = self.reading

    def end_watch(self) -> Verdict:
        self.interpreter.clock.on_step = None
        return self.share.watch.verdict()

    def now(self) -> float:
        return self.clock_now - self.t0

    def reading(self, usage: float) -> None:
        """The server as a step starts while it is watched (its KV usage then: the rest does not change while
        steps only decode)."""
        sched = self.interpreter.clock.server.scheduler
        self.share.watch.reading(preemptions=sched.num_preemptions, waiting=len(sched.waiting), usage=usage)


class VirtualInterpreter:
    """Runs scenario programs on the virtual server (:class:`~cardgen.scenarios.Interpreter`): one process, no
    network but ``network_s``, the next point ``pause_s`` after the last one ended."""

    def __init__(self, clock: _Clock, options: DriveOptions, *, reasoning_share: float = 0.0,
                 host_s_per_token: float = 0.0, max_model_len: int | None = None) -> None:
        self.clock, self.opts = clock, options
        # the served context: a longer request (its images' tokens told only as it is sent) is refused, as the
        # real-time server and vLLM refuse it (HTTP 400, cardgen.sim.validate)
        self.max_model_len = max_model_len
        self.reasoning_share = reasoning_share
        self.host_s_per_token = host_s_per_token  # the server's time per prompt token before a request queues
        self.rng = random.Random(f"client:{options.seed}")
        self.sink = clock.sink  # where each request goes as it ends; None: kept in ``requests``
        self.requests: list[DrivenRequest] = []
        self.tallies: dict[str, list[int]] = {}  # per point's name: its failed requests, its successes' tokens
        self.said: dict[str, Said] = {}  # what each point's first process said once it stopped
        self.t = options.start_unix + options.lead_s  # when the next point may start
        self.last_end: float | None = None
        clock.delivered = self._delivered

    # -- the controller's side -------------------------------------------------------------------------------
    def run_point(self, point: Point, *, attempt: int, judge: Judge, started: Callable[[float], None]) -> Ran:
        t0 = self.t if self.last_end is None else self.last_end + self.opts.pause_s
        self.clock.scrape_until(t0)
        parts = self.opts.processes
        runs = [_PointRun(self, point, judge, attempt, t0, index=i, parts=parts,
                          worker=f"worker-{i}" if parts > 1 else "local") for i in range(parts)]
        for run in runs:
            run.shares = [r.share for r in runs]
        started(t0)
        for run in runs:
            run.share.dispatch(run.share.start())
        shares = [run.share for run in runs]  # asked after every event: one process's share asked alone
        only = shares[0]
        self.clock.run_until((lambda: only.idle) if parts == 1 else (lambda: all(s.idle for s in shares)))
        ended = max((run.last_end for run in runs if run.last_end is not None), default=t0)
        self.last_end = ended
        said = [run.share.said() for run in runs]  # a process with no part in a barrier kind says "complete"
        self.said[point.name] = said[0]
        return Ran(started_unix=t0, ended_unix=ended, said=said)

    def readings(self, started: float, ended: float) -> Sequence[Reading]:
        self.clock.scrape_until(ended)
        return self.clock.readings

    # -- the program's commands ------------------------------------------------------------------------------
    def _send(self, run: _PointRun, send: Send, t: float) -> None:
        """The request leaves at ``t``: it reaches the server ``network_s`` later."""
        fields = record_fields(run.point, send, worker=run.worker, index=run.issued, attempt=run.attempt,
                               scheduled_at=t)
        run.issued += 1
        tokens, hashes = self._prompt(run, send)
        shape = request_shape(run.point)
        cost = shape.virtual(run.point, send) if shape is not None else NO_COST
        if cost.decode_factor <= 0:
            raise ValueError(f"point {run.point.name}: a decode factor must be positive, not {cost.decode_factor}")
        if cost.images:  # the modelled model's vision encoder makes their tokens and work
            vision = getattr(self.clock.server.scheduler.perf, "vision", None)
            if vision is None:
                raise ValueError(f"point {run.point.name}: the performance model has no vision encoder for its "
                                 "images")
            per_image, flops = vision.cost(cost.images)
            cost = replace(cost, images=(), prompt_tokens=cost.prompt_tokens + sum(per_image),
                           encode_flops=cost.encode_flops + flops)
        if cost.record:
            fields = {**fields, "extra": {**(fields.get("extra") or {}), **cost.record}}
        request = _Request(run, send, fields, t, tokens + cost.prompt_tokens, hashes, cost)
        limit = self.max_model_len
        if limit is not None and request.prompt_tokens + send.output_tokens > limit:
            back = t + 2 * self.opts.network_s
            message = (f"This model's maximum context length is {limit} tokens. However, you requested "
                       f"{request.prompt_tokens + send.output_tokens} tokens ({request.prompt_tokens} in the "
                       f"messages, {send.output_tokens} in the completion).")
            self.clock.at(back, lambda: self._complete(request, None, [], back, refused=(400, message)))
            return
        self.clock.at(t + self.opts.network_s, lambda: self._arrive(request))

    def _arrive(self, request: _Request) -> None:
        arrival = request.sent + self.opts.network_s
        host = self.host_s_per_token * request.prompt_tokens
        if host:  # the server's own time on it before it joins the queue (the real-time server sleeps it)
            self.clock.at(arrival + host, lambda: self._queue(request, arrival + host, received=arrival))
        else:
            self._queue(request, arrival)

    def _queue(self, request: _Request, at: float, *, received: float | None = None) -> None:
        seq = self.clock.server.arrive(request.prompt_tokens, request.send.output_tokens, at=at,
                                       tag=request, block_hashes=request.block_hashes, adapter=request.send.adapter,
                                       received=received, encode_flops=request.cost.encode_flops,
                                       decode_factor=request.cost.decode_factor)
        if seq is None:  # a fault answered at once
            back = at + self.opts.network_s
            self.clock.at(back, lambda: self._complete(request, None, [], back))

    def _prompt(self, run: _PointRun, send: Send) -> tuple[int, tuple[int, ...]]:
        """The prompt as the virtual server sees it (its text is not modelled): its tokens, and the hashes of its
        blocks. A chat turn's are its conversation's messages, in order (:meth:`_chat_ids`); any other prompt
        follows its kind's prompt plan (``Kind.shared_spans``, the plan the load engine's texts follow): each
        shared span's tokens the same for every prompt that shares it (a shared prefix, a replayed trace's
        blocks), the rest the request's own. A prompt that shares nothing is unique from its first token (the
        request id), so shares no block."""
        point, size = run.point, self.clock.server.scheduler.block_size
        if send.conversation is not None:
            ids = self._chat_ids(run, send)
            return len(ids), block_hashes(ids, size)
        spans = kind_of(point).shared_spans(point, send)
        if not spans:
            return send.prompt_tokens, ()
        ids = [hash((*span.key, j)) for span in spans for j in range(span.tokens)]
        unique = next(self.clock.order)
        ids += [hash(("request", unique, j)) for j in range(max(0, send.prompt_tokens - len(ids)))]
        return send.prompt_tokens, block_hashes(ids, size)

    @staticmethod
    def _chat_ids(run: _PointRun, send: Send) -> list[int]:
        """A chat turn's prompt as token ids: the conversation so far and the new message (its words less the
        chat template's overhead), each message framed as the virtual server's template frames it
        (``cardgen.sim.tokenizer.count_chat``); the model's replies are ``output_tokens`` words."""
        point, conversation, turn = run.point, send.conversation or 0, send.turn or 1
        # a new id at the head of a fresh history: one more word
        messages = run.chats.ask(send, ("user", max(1, send.prompt_tokens - CHAT_OVERHEAD)),
                                 renew=lambda m: (m[0], m[1] + 1))
        salt = turn if kind_of(point).renews_history(point) else 0  # a fresh history shares no block with the last turn's
        ids: list[int] = []
        for i, (role, words) in enumerate(messages):
            ids += [1, hash(role), 2] + [hash((point.name, conversation, salt, i, j)) for j in range(words)] + [3]
        return ids + [1, hash("assistant"), 2]

    # -- what happened -------------------------------------------------------------------------------------------
    def _delivered(self, served: VirtualRequest) -> None:
        """The server sent a request's last token: its chunks reach the client over the network."""
        request: _Request = served.tag
        net, jitter = self.opts.network_s, self.opts.read_jitter_s
        if jitter:
            arrivals: list[float] = []
            for t in served.times:
                arrival = t + net + self.rng.random() * jitter
                arrivals.append(max(arrival, arrivals[-1]) if arrivals else arrival)
        else:  # the chunks' times only grow, and so do they plus one delay: nothing to keep in order
            arrivals = [t + net for t in served.times]
        self.clock.at(arrivals[-1], lambda: self._complete(request, served, arrivals, arrivals[-1]))

    def _complete(self, request: _Request, served: VirtualRequest | None, chunks: list[float], end: float, *,
                  refused: tuple[int, str] | None = None) -> None:
        run, send = request.run, request.send
        rid = f"{'chatcmpl' if run.point.endpoint == 'chat' else 'cmpl'}-{self.rng.getrandbits(128):032x}"
        # the server answers with headers as the request joins its queue (after any host time before it)
        host = self.host_s_per_token * request.prompt_tokens if served is not None else 0.0
        headers = request.sent + 2 * self.opts.network_s + host
        if served is None:  # an HTTP error with the server's JSON error body, as the load engine records it
            status, words, kind = (500, "injected fault (http500)", "InternalServerError") if refused is None \
                else (*refused, "BadRequestError")
            body = json.dumps(error_body(status, words, kind))
            record = RequestRecord(**request.fields, sent_at=request.sent, headers_at=headers, end_at=end,
                                   status=status, error=f"HTTP {status}: {' '.join(body[:160].split())}".strip(),
                                   error_kind=ErrorKind.HTTP_STATUS)
        else:
            record = RequestRecord(**request.fields, sent_at=request.sent, headers_at=headers,
                                   first_token_at=chunks[0], chunk_times=chunks, end_at=end, response_id=rid,
                                   status=200, prompt_tokens=served.prompt_tokens,
                                   output_tokens=served.output_tokens, finish_reason="length",
                                   engine_timings=EngineTimings.of_vllm_numbers(served.engine_metrics()),
                                   **self._reasoning(run.point.endpoint == "chat", served, chunks))
        if send.conversation is not None:  # the reply goes back without its reasoning, as a client's
            answer = send.output_tokens - (record.reasoning_tokens or 0)
            run.chats.answered(send, ("assistant", answer) if record.ok else None)
        driven = DrivenRequest(record, served)
        if self.sink is not None:
            self.sink.request(driven)
        else:
            self.requests.append(driven)
        tally = self.tallies.setdefault(record.scenario, [0, 0])
        if record.ok:
            tally[1] += record.output_tokens or 0
        else:
            tally[0] += 1
        run.last_end = end if run.last_end is None else max(run.last_end, end)
        run.clock_now = end
        outcome = Outcome.of(record)  # the judge's and the program's (its figures computed once for both)
        if run.judge.record(outcome, end - run.t0):  # every process is told, as the master tells agents
            for share in run.shares:
                share.told_precise()
        run.share.ended(send, record, outcome=outcome)


    def _reasoning(self, chat: bool, served: VirtualRequest, chunks: list[float]) -> dict[str, Any]:
        """The fields a client's record of this stream holds about its reasoning, as the real-time server streams
        it (:mod:`cardgen.sim.reasoning`): the answer's first chunk, the chunks that carried reasoning, and the
        reasoning tokens (chat: the server's usage; completions: the ``<think>`` span through ``/tokenize``)."""
        share = self.reasoning_share
        split = thinking(share, served.output_tokens, chat=chat)
        first_answer, reasoning_chunks, last = None, 0, 0
        if share <= 0:  # no reasoning (split is NONE): the answer starts with the first chunk
            return {"first_answer_at": chunks[0] if chunks else None, "reasoning_chunks": 0}
        for at, tokens in zip(chunks, served.chunk_tokens or (1,) * len(chunks), strict=True):
            first, last = last + 1, last + tokens
            if split.is_reasoning(first):
                reasoning_chunks += 1
            if first_answer is None and split.first_answer is not None and last >= split.first_answer:
                first_answer = at
        out: dict[str, Any] = {"first_answer_at": first_answer, "reasoning_chunks": reasoning_chunks}
        if share > 0 and chat:  # the server's reasoning parser counts, 0 included
            out.update(reasoning_tokens=split.reasoning_tokens, reasoning_tokens_source="usage")
        elif split.reasoning_tokens:
            out.update(reasoning_tokens=split.reasoning_tokens, reasoning_tokens_source="tokenize")
        return out


# --- entry points --------------------------------------------------------------------------------------------


#: hears of each point as it ends (run, skipped or cut off): its outcome, and every request and scrape so far
PointEnded = Callable[[PointOutcome, Sequence[DrivenRequest], Sequence[MetricSample]], None]


def drive(points: Sequence[Point], config: SimConfig, *, perf: PerfModel | None = None,
          options: DriveOptions | None = None, run_saturated: bool = False,
          attempts: Mapping[str, int] | None = None, on_point_end: PointEnded | None = None,
          sink: DriveSink | None = None) -> Drive:
    """Run ``points`` one after another on one virtual server configured like ``cardgen serve-sim`` would be by
    ``config`` (``perf`` overrides the performance model it builds), in virtual time, as the controller
    sequences them for the load engine (skipping after saturation unless ``run_saturated``; each point as its
    ``attempts`` entry says). With a ``sink``, every request and scrape goes there as it happens and none is
    kept (``on_point_end`` is then given none)."""
    opts = options or DriveOptions()
    base = build_perf(config) if perf is None else perf
    points = sample_datasets(points, config, base)
    model = _Jitter(base, opts.step_jitter, opts.seed) if opts.step_jitter else base
    metrics = None
    if config.metrics and opts.scrapes:  # its figures are read by a scrape alone: none kept, none counted
        cache = cache_config_labels(base, max_len=max_model_len(config, base)) if config.cache_config else None
        metrics = SimMetrics(model_name=config.model_name, cache_config=cache)
    server = VirtualServer(model, chunked_prefill=bool(config.chunked_prefill), metrics=metrics,
                           faults=config.faults, **config.scheduler_options())
    server.keep_finished = False  # the driver reads each step's finished requests; none is read again
    server.now = opts.start_unix
    clock = _Clock(server, metrics, opts, sink)
    interpreter = VirtualInterpreter(clock, opts, reasoning_share=config.served.reasoning_share,
                                     host_s_per_token=config.served.host_s_per_token,
                                     max_model_len=max_model_len(config, base))
    ended = None if on_point_end is None else (
        lambda point, outcome: on_point_end(outcome, interpreter.requests, clock.scrapes))
    outcomes = run_points(points, interpreter, attempts=attempts, run_saturated=run_saturated, on_end=ended).points
    end = (interpreter.t if interpreter.last_end is None else interpreter.last_end) + 0.1  # the scraper's last
    clock.scrape_until(end)
    if not clock.readings or clock.readings[-1].t < end:
        clock.next_scrape = end
        clock.scrape()
    runs = [_point_run(outcome, interpreter) for outcome in outcomes]
    return Drive(points=runs, requests=interpreter.requests, scrapes=clock.scrapes, started_unix=opts.start_unix,
                 ended_unix=end + SCRAPE_S, server=server)


def _point_run(outcome: PointOutcome, interpreter: VirtualInterpreter) -> PointRun:
    failed, output_tokens = interpreter.tallies.get(outcome.name, (0, 0))
    said = interpreter.said.get(outcome.name)
    run = PointRun(name=outcome.name, kind=outcome.kind, started_unix=outcome.started_unix,
                   ended_unix=outcome.ended_unix, requests=outcome.requests, stop=outcome.stop,
                   detail=outcome.detail, saturated=outcome.saturation, attempt=outcome.attempt,
                   failed=failed, output_tokens=output_tokens,
                   skipped=outcome.detail if outcome.stop == STOP_SKIPPED else None)
    if said is not None and said.sizes:
        run.sizes = list(said.sizes)
        run.saturated = said.saturated
    return run


def sample_datasets(points: Sequence[Point], config: SimConfig, perf: PerfModel) -> list[Point]:
    """The points, those that bring their own prompts sampled if they were not (``cardgen.datasets.resolve``),
    counted as the virtual server's ``/tokenize`` counts them (``cardgen.sim.tokenizer``)."""
    if not any(p.brings_prompts and not p.items for p in points):
        return list(points)

    def counter(endpoint: str) -> Callable[[str], int]:
        if endpoint == "chat":
            return lambda text: tokenizer.count_chat([{"role": "user", "content": text}])
        return tokenizer.count_text

    sampled, _ = resolve([p for p in points if p.brings_prompts and not p.items], counter=counter,
                         max_model_len=max_model_len(config, perf))
    fresh = {p.name: p for p in sampled}
    return [fresh.get(p.name, p) for p in points]


def simulate_closed_loop(perf: PerfModel, *, prompt_tokens: int, output_tokens: int, parallel: int, num_requests: int,
                chunked_prefill: bool = False) -> list[VirtualRequest]:
    """``parallel`` users in a closed loop until ``num_requests`` were sent, from time 0 on an idle server, with
    no network: the server's side of each request, in arrival order."""
    from cardgen.kinds.closed.schema import ClosedParams  # noqa: PLC0415  the closed kind's own params: this helper of the benchmarks and the calibration table needs it, a run does not

    if parallel < 1 or num_requests < 1:
        raise ValueError("parallel and num_requests must be at least 1")
    point = Point(name="closed", group="closed", endpoint="completions", timeout_s=math.inf,
                  prompt_tokens=prompt_tokens, output_tokens=output_tokens, parallel=min(parallel, num_requests),
                  params=ClosedParams(min_requests=num_requests, max_requests=num_requests))
    config = SimConfig(model="virtual", perf="fixed", chunked_prefill=chunked_prefill, metrics=False)
    run = drive([point], config, perf=perf, options=DriveOptions(start_unix=0.0, lead_s=0.0, scrapes=False))
    return sorted((r.served for r in run.requests if r.served is not None), key=lambda r: r.index)


def probe_answer(config: SimConfig, perf: PerfModel, *, started_unix: float) -> ServerInfo:
    """What ``cardgen build``'s probe would say about this virtual server: its own ``/v1/models``,
    ``/version`` and ``/cardgen/sim`` answers (:mod:`cardgen.sim.answers`), with no process behind them."""
    length = max_model_len(config, perf)
    described = describe(config, perf, Scheduler(perf, chunked_prefill=bool(config.chunked_prefill)), max_model_len=length,
                         faults=config.faults, started_at=started_unix, url=URL, pid=None)
    models, version = models_answer(config, max_model_len=length, started_at=started_unix), version_answer()
    extra = {"sim": described}
    return ServerInfo(url=URL, engine=ENGINE_NAME, engine_version=get_adapter(ENGINE_NAME).server_version(extra, version),
                      served_model=config.model_name, models=models, version=version, extra=extra,
                      tokenizer="server /tokenize" if config.tokenize else "usage.prompt_tokens calibration")
