"""The virtual-time driver: the points of a suite run on one :class:`~cardgen.sim.virtual.VirtualServer`, in
virtual time, by the load engine's own rules (:mod:`cardgen.points`), with no sleeping and no sockets.

What the load engine does in real time, the driver does on a virtual clock: closed-loop users send again the
moment their last request ends until :meth:`Point.closed_continues` says stop; open-loop requests leave at
:meth:`Point.arrival_offsets`; waves grow by :meth:`Point.wave_sizes` or :meth:`Point.wave_search` and stop at
saturation (:func:`cardgen.saturation.wave_saturated`, read from the server while each wave runs); ingestion
prompts go one at a time in :meth:`Point.ingest_order`; batch rounds follow :meth:`Point.batch_rounds`. A
closed-loop point that saturates the server (:func:`cardgen.saturation.point_saturation`, read at every scrape)
leaves out the points :meth:`Point.skips_after_saturation` names. Points run one after another, ``pause_s``
apart; each ends with its stop reason, as ``run.json`` records it (:class:`~cardgen.schemas.PointOutcome`).

What it records is what a real run records: a :class:`~cardgen.schemas.RequestRecord` per request (send time,
headers, every chunk's arrival, usage) and a :class:`~cardgen.schemas.MetricSample` per scrape of the
virtual server's own ``/metrics`` (:class:`~cardgen.sim.metrics.SimMetrics`), every ``scrape_interval_s``,
from before the first request to after the last. :func:`simulate_run` adds ``run.json`` as the virtual
server's probe would fill it and :func:`write_run` writes the raw run directory, ready for ``cardgen render``.
Every time is anchored at ``start_unix``, and every draw is seeded: the same arguments give the same bytes.

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

import datetime as _dt
import heapq
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cardgen.points import Point, expand, fit_context
from cardgen.precision import batch_precise, closed_precise, ingest_precise, round_decode_speed
from cardgen.saturation import Reading, closed_load_seen, point_saturation, wave_saturated
from cardgen.schemas import ErrorKind, MetricSample, PointOutcome, RequestRecord, RunInfo, ServerInfo
from cardgen.schemas.run import (
    STOP_COMPLETE,
    STOP_PRECISION,
    STOP_SATURATED,
    STOP_SKIPPED,
)
from cardgen.sim.config import SimConfig, build_perf, cache_config_labels, max_model_len
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.virtual import VirtualRequest, VirtualServer
from cardgen.suite import Suite

T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z: the default start, so that a virtual run is reproducible
URL = "http://127.0.0.1:8000"  # where the virtual server would listen
SCRAPE_S = 0.001  # how long one scrape of /metrics takes


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

    def __post_init__(self) -> None:
        if min(self.network_s, self.read_jitter_s, self.step_jitter, self.lead_s, self.pause_s) < 0:
            raise ValueError("delays, jitters and pauses must not be negative")
        if self.scrape_interval_s <= 0:
            raise ValueError("scrape_interval_s must be positive")


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
    waves: list[int] = field(default_factory=list)  # waves: the size of each wave sent, in order
    saturated: str | None = None  # closed loop: why it saturated the server; waves: the first saturating wave
    skipped: str | None = None  # why it was not run
    stop: str | None = None  # why it stopped: one of cardgen.schemas.run's STOP_* reasons
    detail: str | None = None  # the words behind ``stop``

    def outcome(self) -> PointOutcome:
        """What ``run.json`` says of the point."""
        return PointOutcome(name=self.name, kind=self.kind, started_unix=self.started_unix,
                            ended_unix=self.ended_unix, requests=self.requests, stop=self.stop, detail=self.detail,
                            saturation=self.saturated if self.kind == "closed" else None)

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


@dataclass
class Drive:
    """A virtual run: its points, its requests in the order they ended (as ``requests.jsonl`` holds them) and
    its scrapes of ``/metrics``."""

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


@dataclass
class SimulatedRun:
    """A virtual run with the ``run.json`` the load stage would write for it."""

    info: RunInfo
    drive: Drive

    def write(self, run_dir: Path) -> Path:
        """The raw run directory (:func:`write_run`)."""
        return write_run(run_dir, self.info, self.drive.records, self.drive.scrapes)


# --- the driver ------------------------------------------------------------------------------------------


class _Jitter:
    """A PerfModel whose step durations vary around ``perf``'s by a seeded relative standard deviation."""

    def __init__(self, perf: PerfModel, rel: float, seed: int) -> None:
        self.perf, self.rel = perf, rel
        self.rng = random.Random(f"steps:{seed}")
        self.kv_capacity_tokens = perf.kv_capacity_tokens
        self.block_size = perf.block_size
        self.max_num_seqs = perf.max_num_seqs
        self.max_num_batched_tokens = perf.max_num_batched_tokens

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        return self.perf.step_time_s(prefill, decode) * max(0.5, 1.0 + self.rel * self.rng.gauss(0.0, 1.0))

    def describe(self) -> dict[str, object]:
        return self.perf.describe()


@dataclass(eq=False)
class _Request:
    """One request on the client's side while it is under way."""

    state: _PointState
    fields: dict[str, Any]  # the RequestRecord fields the point fixes (scenario, kind, targets, index...)
    prompt_tokens: int
    output_tokens: int
    sent: float
    on_done: Callable[[float], None]
    block_ids: list[int] | None = None  # the prompt's token ids where they matter (prefix caching)


@dataclass(eq=False)
class _PointState:
    point: Point
    run: PointRun
    t0: float
    issued: int = 0
    in_flight: int = 0
    more: bool = True  # more requests may still be sent
    precise: bool = False  # closed loop: once judged precise, the whole point stops (as the runner tells agents)
    checked_at: int = -1  # closed loop: how many requests had ended when precision was last judged
    finished: bool = False
    done: list[DrivenRequest] = field(default_factory=list)

    def check(self) -> None:
        if not self.more and self.in_flight == 0:
            self.finished = True


class _Driver:
    def __init__(self, server: VirtualServer, metrics: SimMetrics | None, options: DriveOptions,
                 chat: Callable[[Point], bool]) -> None:
        self.server, self.metrics, self.opts = server, metrics, options
        self.rng = random.Random(f"client:{options.seed}")
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.next_scrape = options.start_unix
        self.scrapes: list[MetricSample] = []
        self.readings: list[tuple[float, float, int, int]] = []  # (t, kv usage, waiting, preemptions), per scrape
        self.requests: list[DrivenRequest] = []
        self.on_step: Callable[[], None] | None = None
        self.chat = chat

    # -- events -------------------------------------------------------------------------------------------
    def at(self, t: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (t, next(self.order), action))

    def run_until(self, done: Callable[[], bool]) -> None:
        """Process client events, steps and scrapes in time order until ``done()``. Ties: a scrape first, then
        client events (a request that arrives as a step ends joins the next step), then the step's end."""
        srv = self.server
        blocked = False  # requests wait for blocks only a later event can free
        while not done():
            t_event = self.events[0][0] if self.events else math.inf
            if srv.in_flight is None and srv.has_work and not blocked and t_event > srv.now:
                if srv.start_step() is None:
                    blocked = True
                elif self.on_step is not None:
                    self.on_step()
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
                    self._delivered(served)

    def scrape(self) -> None:
        t = self.next_scrape
        sched = self.server.scheduler
        self.readings.append((t, sched.kv_usage, len(sched.waiting), sched.num_preemptions))
        if self.opts.scrapes and self.metrics is not None:
            self.scrapes.append(MetricSample(t=t, t_end=t + SCRAPE_S, samples=self.metrics.samples(sched)))
        self.next_scrape = t + self.opts.scrape_interval_s

    def scrape_until(self, t: float) -> None:
        """Scrape an idle server up to ``t``."""
        while self.next_scrape <= t:
            self.scrape()

    # -- one request ----------------------------------------------------------------------------------------
    def send(self, state: _PointState, t: float, on_done: Callable[[float], None], *,
             prompt_tokens: int | None = None, block_ids: list[int] | None = None, **fields: Any) -> None:
        """The load engine's ``send``: the record fields it fixes, then the request leaves at ``t``."""
        point = state.point
        length = point.prompt_tokens if prompt_tokens is None else prompt_tokens
        output_tokens = point.output_tokens
        if point.dataset is not None or point.kind == "prefix":  # its own lengths (cardgen.datasets.resolve)
            length, output_tokens = point.item_lengths(fields["item"])
        record = {
            "scenario": point.name, "kind": point.kind, "group": point.group, "endpoint": point.endpoint,
            "prompt_tokens_target": length, "output_tokens_target": output_tokens,
            "worker": "local", "index": state.issued, **fields,
        }
        state.issued += 1
        state.in_flight += 1
        request = _Request(state, record, length, output_tokens, t, on_done, block_ids)
        self.at(t + self.opts.network_s, lambda: self._arrive(request))

    def _arrive(self, request: _Request) -> None:
        arrival = request.sent + self.opts.network_s
        seq = self.server.arrive(request.prompt_tokens, request.output_tokens, at=arrival, tag=request,
                                 block_hashes=self._block_hashes(request))
        if seq is None:  # a fault answered at once
            back = arrival + self.opts.network_s
            self.at(back, lambda: self._complete(request, None, [], back))

    def _block_hashes(self, request: _Request) -> tuple[int, ...]:
        """What the virtual server hashes of a prompt's blocks (its text is not modelled here): a shared-prefix
        request's first ``prefix_tokens`` tokens are its prefix's, the rest its own, as the load engine's prompts
        (``cardgen.load.prompts.prefix_templates``); every other prompt is unique from its first token (the
        request id), so shares no block."""
        point = request.state.point
        from cardgen.sim.scheduler import block_hashes

        if request.block_ids is not None:
            return block_hashes(request.block_ids, self.server.scheduler.block_size)
        if point.kind != "prefix":
            return ()

        prefix = request.fields["prefix"]
        shared = min(point.prefix_tokens, request.prompt_tokens)
        unique = next(self.order)
        ids = [hash(("prefix", point.name, prefix, j)) for j in range(shared)]
        ids += [hash(("request", unique, j)) for j in range(request.prompt_tokens - shared)]
        return block_hashes(ids, self.server.scheduler.block_size)

    def _delivered(self, served: VirtualRequest) -> None:
        """The server sent a request's last token: its chunks reach the client over the network."""
        request: _Request = served.tag
        net, jitter = self.opts.network_s, self.opts.read_jitter_s
        arrivals: list[float] = []
        for t in served.times:
            arrival = t + net + (self.rng.random() * jitter if jitter else 0.0)
            arrivals.append(max(arrival, arrivals[-1]) if arrivals else arrival)
        self.at(arrivals[-1], lambda: self._complete(request, served, arrivals, arrivals[-1]))

    def _complete(self, request: _Request, served: VirtualRequest | None, chunks: list[float],
                  end: float) -> None:
        state = request.state
        point = state.point
        chat = self.chat(point)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self.rng.getrandbits(128):032x}"
        headers = request.sent + 2 * self.opts.network_s  # the server answers with headers as the request arrives
        if served is None:  # HTTP 500 with the server's JSON error body, as the load engine records it
            from cardgen.sim.server import error_body

            body = json.dumps(error_body(500, "injected fault (http500)", "InternalServerError"))
            record = RequestRecord(**request.fields, sent_at=request.sent, headers_at=headers, end_at=end,
                                   status=500, error=f"HTTP 500: {' '.join(body[:160].split())}".strip(),
                                   error_kind=ErrorKind.HTTP_STATUS)
        else:
            record = RequestRecord(**request.fields, sent_at=request.sent, headers_at=headers,
                                   first_token_at=chunks[0], chunk_times=chunks, end_at=end, response_id=rid,
                                   status=200, prompt_tokens=served.prompt_tokens,
                                   output_tokens=served.output_tokens, finish_reason="length")
        driven = DrivenRequest(record, served)
        self.requests.append(driven)
        state.done.append(driven)
        state.in_flight -= 1
        request.on_done(end)
        state.check()


# --- the scenario kinds ------------------------------------------------------------------------------------


def _closed(drv: _Driver, state: _PointState) -> None:
    point, t0 = state.point, state.t0
    quota, cap = point.closed_quota(0, 1), point.closed_cap(0, 1)
    users = point.closed_slots(0, 1)

    def user(t: float) -> None:
        nonlocal users
        if (point.target_ci is not None and not state.precise and state.issued >= quota
                and t - t0 >= point.min_duration_s and len(state.done) >= state.checked_at + (point.parallel or 1)):
            state.checked_at = len(state.done)  # judged once a round, as the load runner does
            state.precise = _precise(state)
        precise = state.precise
        if point.closed_continues(issued=state.issued, quota=quota, elapsed_s=t - t0, cap=cap, precise=precise):
            drv.send(state, t, user, parallel=point.parallel)
            return
        users -= 1
        state.more = users > 0
        if state.run.stop is None:  # why the first user stopped
            state.run.stop, state.run.detail = point.closed_stop(issued=state.issued, elapsed_s=t - t0, cap=cap,
                                                                 precise=precise)

    for _ in range(users):
        user(t0)
    state.check()


def _precise(state: _PointState) -> bool:
    """Whether the point's figures are as precise as its target (:func:`cardgen.precision.closed_precise`)."""
    return closed_precise([d.record for d in state.done], target=state.point.target_ci or 0.0,
                          parallel=state.point.parallel or 1)


def _open(drv: _Driver, state: _PointState) -> None:
    point, t0 = state.point, state.t0
    offsets = point.arrival_offsets(0, 1)
    left = len(offsets)
    state.more = left > 0

    def fire(t: float, number: int) -> None:
        nonlocal left
        left -= 1
        state.more = left > 0
        item = {"item": number} if point.dataset is not None else {}
        drv.send(state, t, lambda end: None, scheduled_at=t, rate_rps=point.rate_rps, **item)

    for number, offset in zip(point.request_numbers(0, 1), offsets, strict=True):
        t = t0 + offset
        drv.at(t, lambda t=t, number=number: fire(t, number))
    state.check()


def _waves(drv: _Driver, state: _PointState) -> None:
    point = state.point
    search = point.wave_search() if point.search == "bisect" else None
    sizes = iter(point.wave_sizes())
    sched = drv.server.scheduler

    def next_wave(t: float) -> None:
        size = search.next_size() if search is not None else next(sizes, None)
        if size is None:
            state.more = False
            drv.on_step = None
            if search is not None and search.bracketed:
                state.run.stop, state.run.detail = STOP_SATURATED, f"between waves of {search.low} and {search.high}"
            return
        state.run.waves.append(size)
        preempted0 = sched.num_preemptions
        seen = {"saturated": False, "left": size}

        def reading() -> None:  # the server while a step of this wave runs
            if wave_saturated(preempted=sched.num_preemptions > preempted0, waiting=len(sched.waiting),
                              kv_usage=sched.kv_usage):
                seen["saturated"] = True

        def one_done(end: float) -> None:
            seen["left"] -= 1
            if seen["left"]:
                return
            saturated = bool(seen["saturated"])
            if saturated and state.run.saturated is None:
                state.run.saturated = f"wave of {size}"
            if search is not None:
                search.report(size, saturated)
            elif saturated and point.stop_at_saturation:
                state.more = False
                drv.on_step = None
                state.run.stop, state.run.detail = STOP_SATURATED, f"wave of {size}"
                return
            next_wave(end)

        drv.on_step = reading
        for _ in range(size):
            drv.send(state, t, one_done, wave=size, parallel=size)

    next_wave(state.t0)
    state.check()


def _ingest(drv: _Driver, state: _PointState) -> None:
    point = state.point
    order = iter(point.ingest_order())
    per_sweep = len(point.lengths)

    def next_prompt(t: float) -> None:
        sent = state.issued
        if sent and sent % per_sweep == 0:  # a sweep is complete: another only if the slope is not yet known
            precise = point.target_ci is not None and ingest_precise([d.record for d in state.done],
                                                                     target=point.target_ci)
            if not point.more_sweeps(sent // per_sweep, precise=precise):
                state.more = False
                if precise:
                    state.run.stop, state.run.detail = STOP_PRECISION, f"slope within +-{point.target_ci:.0%}"
                return
        item = next(order, None)
        if item is None:
            state.more = False
            return
        length, repeat = item
        drv.send(state, t, next_prompt, prompt_tokens=length, repeat=repeat, parallel=1)

    next_prompt(state.t0)
    state.check()


def _batch(drv: _Driver, state: _PointState) -> None:
    point = state.point
    size = point.parallel or 1
    planned = point.batch_rounds()
    round_speeds: list[float | None] = []  # the measured rounds' mean decode speeds
    rounds = {"done": 0}

    def next_round(t: float) -> None:
        if rounds["done"] < len(planned):
            repeat, warmup = planned[rounds["done"]]
        else:
            precise = point.target_ci is not None and batch_precise(round_speeds, target=point.target_ci)
            if not point.more_batch_rounds(len(round_speeds), precise=precise):
                state.more = False
                if precise:
                    state.run.stop, state.run.detail = STOP_PRECISION, f"round means within +-{point.target_ci:.0%}"
                return
            repeat, warmup = len(round_speeds), False
        left = {"n": size}
        mine: list[RequestRecord] = []

        def one_done(end: float) -> None:
            left["n"] -= 1
            mine.append(state.done[-1].record)
            if not left["n"]:
                rounds["done"] += 1
                if not warmup:
                    round_speeds.append(round_decode_speed(mine))
                next_round(end)

        for _ in range(size):
            drv.send(state, t, one_done, repeat=repeat, warmup=warmup, parallel=size)

    next_round(state.t0)
    state.check()


def _prefix(drv: _Driver, state: _PointState) -> None:
    """Shared prefixes, one request at a time in :meth:`Point.prefix_order`."""
    point = state.point
    order = iter(enumerate(point.prefix_order()))

    def next_request(t: float) -> None:
        item = next(order, None)
        if item is None:
            state.more = False
            return
        n, (prefix, phase) = item
        drv.send(state, t + point.pause_before(n), next_request, item=prefix, prefix=prefix, phase=phase,
                 parallel=1)

    next_request(state.t0)
    state.check()


def _chat(drv: _Driver, state: _PointState) -> None:
    """Users hold their conversations (:meth:`Point.chat_conversations`) one after another: each turn sends
    the history and a new message, the next follows ``think_time_s`` after the reply ends. The prompt is what
    the virtual server's chat template counts (``cardgen.sim.tokenizer.count_chat``): every message's words and
    its overhead; the model's replies are ``output_tokens`` words."""
    from cardgen.sim.tokenizer import CHAT_MESSAGE_OVERHEAD, CHAT_REPLY_OVERHEAD

    point = state.point
    users = point.parallel or 1
    overhead = CHAT_MESSAGE_OVERHEAD + CHAT_REPLY_OVERHEAD  # a one-message conversation's tokens beyond its words
    active = {"users": users}

    def run_user(slot: int, t: float) -> None:
        todo = iter(point.chat_conversations(slot))

        def next_conversation(t: float) -> None:
            conversation = next(todo, None)
            if conversation is None:
                active["users"] -= 1
                state.more = active["users"] > 0
                return
            messages: list[tuple[str, int]] = []  # (role, words) of the history

            def turn(n: int, t: float) -> None:
                if n > point.turns:
                    next_conversation(t)
                    return
                messages.append(("user", max(1, point.chat_message_tokens(n) - overhead)))
                if point.fresh_history and n > 1:  # a new id at the head of the history: one more word
                    messages[0] = ("user", messages[0][1] + 1)
                salt = n if point.fresh_history else 0  # a fresh history shares no block with the last turn's
                ids: list[int] = []
                for i, (role, words) in enumerate(messages):
                    ids += [1, hash(role), 2] + [hash((point.name, conversation, salt, i, j))
                                                 for j in range(words)] + [3]
                ids += [1, hash("assistant"), 2]

                def done(end: float) -> None:
                    if not state.done[-1].record.ok:
                        next_conversation(end)
                        return
                    messages.append(("assistant", point.output_tokens))
                    wait = point.think_time_s if n < point.turns else 0.0
                    turn(n + 1, end + wait)

                drv.send(state, t, done, prompt_tokens=len(ids), conversation=conversation, turn=n,
                         parallel=point.parallel, block_ids=ids)

            turn(1, t)

        next_conversation(t)

    for slot in range(users):
        run_user(slot, state.t0)
    state.check()


_KINDS: dict[str, Callable[[_Driver, _PointState], None]] = {
    "closed": _closed, "open": _open, "waves": _waves, "ingest": _ingest, "batch": _batch, "prefix": _prefix,
    "chat": _chat,
}


def _closed_saturation(drv: _Driver, state: _PointState) -> str | None:
    """Why a closed-loop point saturated the server (:func:`cardgen.saturation.closed_load_seen`), from what
    its scrapes showed and its requests' speed."""
    run = state.run
    ends = sorted(d.record.end_at for d in state.done if d.record.end_at is not None)
    parallel = state.point.parallel or 1
    speeds = [(d.record.output_tokens or 0) / (d.record.end_at - d.record.sent_at)  # type: ignore[operator]
              for d in state.done if d.record.ok]
    seen = closed_load_seen([Reading(t=t, usage=u, waiting=w, preemptions=p) for t, u, w, p in drv.readings],
                            started=run.started_unix or 0.0, ended=run.ended_unix or 0.0,
                            first_round_end=ends[parallel - 1] if len(ends) >= parallel else None,
                            median_speed_tok_s=statistics.median(speeds) if speeds else None)
    return point_saturation(seen)


# --- entry points --------------------------------------------------------------------------------------------


def drive(points: Sequence[Point], config: SimConfig, *, perf: PerfModel | None = None,
          options: DriveOptions | None = None) -> Drive:
    """Run ``points`` one after another on one virtual server configured like ``cardgen serve-sim`` would be by
    ``config`` (``perf`` overrides the performance model it builds), in virtual time."""
    opts = options or DriveOptions()
    base = build_perf(config) if perf is None else perf
    sample_datasets(points, config, base)
    model = _Jitter(base, opts.step_jitter, opts.seed) if opts.step_jitter else base
    metrics = None
    if config.metrics:
        cache = cache_config_labels(base, max_len=max_model_len(config, base)) if config.cache_config else None
        metrics = SimMetrics(model_name=config.model_name, cache_config=cache)
    server = VirtualServer(model, chunked_prefill=config.chunked_prefill, metrics=metrics, faults=config.faults)
    server.now = opts.start_unix
    drv = _Driver(server, metrics, opts, chat=lambda p: p.endpoint == "chat")
    runs = [PointRun(name=p.name, kind=p.kind) for p in points]
    t = opts.start_unix + opts.lead_s
    last: float | None = None
    for i, (point, run) in enumerate(zip(points, runs, strict=True)):
        if run.skipped is not None:
            continue
        if last is not None:
            t = last + opts.pause_s
        drv.scrape_until(t)
        state = _PointState(point, run, t)
        run.started_unix = t
        drv.at(t, lambda start=_KINDS[point.kind], state=state: start(drv, state))
        drv.run_until(lambda state=state: state.finished)
        last = run.ended_unix = max((d.record.end_at or t for d in state.done), default=t)
        run.requests = len(state.done)
        run.failed = sum(1 for d in state.done if not d.record.ok)
        run.output_tokens = sum(d.record.output_tokens or 0 for d in state.done if d.record.ok)
        if point.kind == "closed":
            drv.scrape_until(last)
            run.saturated = _closed_saturation(drv, state)
            if run.saturated:
                for later, later_run in zip(points[i + 1:], runs[i + 1:], strict=True):
                    if point.skips_after_saturation(later) and later_run.skipped is None:
                        later_run.skipped = (f"not run: the server saturated at {point.parallel} parallel "
                                             f"({run.saturated})")
                        later_run.stop, later_run.detail = STOP_SKIPPED, later_run.skipped
        run.stop = run.stop or STOP_COMPLETE
    end = (t if last is None else last) + 0.1  # the scraper's last scrape, once the load has ended
    drv.scrape_until(end)
    if not drv.readings or drv.readings[-1][0] < end:
        drv.next_scrape = end
        drv.scrape()
    return Drive(points=runs, requests=drv.requests, scrapes=drv.scrapes, started_unix=opts.start_unix,
                 ended_unix=end + SCRAPE_S, server=server)


def sample_datasets(points: Sequence[Point], config: SimConfig, perf: PerfModel) -> None:
    """Draw the requests of the dataset points not sampled yet (``cardgen.datasets.resolve``), counted as the
    virtual server's ``/tokenize`` counts them (``cardgen.sim.tokenizer``)."""
    todo = [p for p in points if (p.dataset is not None or p.kind == "prefix") and not p.items]
    if not todo:
        return
    from cardgen.datasets import resolve
    from cardgen.sim import tokenizer

    def counter(endpoint: str) -> Callable[[str], int]:
        if endpoint == "chat":
            return lambda text: tokenizer.count_chat([{"role": "user", "content": text}])
        return tokenizer.count_text

    resolve(todo, counter=counter, max_model_len=max_model_len(config, perf))


def closed_loop(perf: PerfModel, *, prompt_tokens: int, output_tokens: int, parallel: int, num_requests: int,
                chunked_prefill: bool = False) -> list[VirtualRequest]:
    """``parallel`` users in a closed loop until ``num_requests`` were sent, from time 0 on an idle server, with
    no network: the server's side of each request, in arrival order."""
    if parallel < 1 or num_requests < 1:
        raise ValueError("parallel and num_requests must be at least 1")
    point = Point(name="closed", kind="closed", group="closed", endpoint="completions", timeout_s=math.inf,
                  prompt_tokens=prompt_tokens, output_tokens=output_tokens, parallel=min(parallel, num_requests),
                  min_requests=num_requests, max_requests=num_requests)
    config = SimConfig(model="virtual", perf="fixed", chunked_prefill=chunked_prefill, metrics=False)
    run = drive([point], config, perf=perf, options=DriveOptions(start_unix=0.0, lead_s=0.0, scrapes=False))
    return sorted((r.served for r in run.requests if r.served is not None), key=lambda r: r.index)


def _utc(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def probe_answer(config: SimConfig, perf: PerfModel, *, started_unix: float) -> ServerInfo:
    """What ``cardgen build``'s probe would say about this virtual server: its own ``/v1/models``,
    ``/version`` and ``/cardgen/sim`` answers, read from a :class:`~cardgen.sim.server.SimServer` that is
    never started."""
    import asyncio

    from cardgen.engines import get_adapter
    from cardgen.sim.server import ENGINE_NAME, SimServer

    server = SimServer(config, perf)
    server.started_at, server.url = started_unix, URL

    async def answers() -> tuple[Any, Any]:
        models, version = await server.models(None), await server.version(None)  # type: ignore[arg-type]
        return json.loads(models.text or "null"), json.loads(version.text or "null")

    models, version = asyncio.run(answers())
    described = server.describe()
    described["pid"] = None  # no process: the server ran in virtual time
    extra = {"sim": described}
    return ServerInfo(url=URL, engine=ENGINE_NAME, engine_version=get_adapter(ENGINE_NAME).server_version(extra, version),
                      served_model=config.model_name, models=models, version=version, extra=extra,
                      tokenizer="server /tokenize" if config.tokenize else "usage.prompt_tokens calibration")


def simulate_run(suite: Suite, config: SimConfig, *, perf: PerfModel | None = None,
                 options: DriveOptions | None = None, command: Sequence[str] | None = None,
                 run_dir: Path | None = None) -> SimulatedRun:
    """``cardgen build`` against the virtual server, in virtual time: the suite's points that fit the served
    context, driven, with the ``run.json`` the load stage would write (``modelled``, engine ``cardgen-sim``,
    the virtual server's own description). Written to ``run_dir`` when given (see :func:`write_run`)."""
    from cardgen import __version__
    from cardgen.redact import redact_argv

    opts = options or DriveOptions()
    model = build_perf(config) if perf is None else perf
    server = probe_answer(config, model, started_unix=opts.start_unix)
    points, warnings = fit_context(expand(suite), max_model_len(config, model))
    run = drive(points, config, perf=model, options=opts)
    if not config.metrics:
        warnings.append("the server has no Prometheus /metrics: no server-side figures (KV usage, queue)")
    records = run.records
    failures: dict[str, int] = {}
    for r in records:
        if not r.ok:
            failures[str(r.error_kind)] = failures.get(str(r.error_kind), 0) + 1
    argv = list(command) if command is not None else [
        "cardgen", "build", config.model, "--gpu", config.gpu, "--tp", str(config.tp), "--suite", suite.name]
    info = RunInfo(
        cardgen_version=__version__, command=redact_argv(argv), model=config.model, suite=suite.name,
        suite_spec=suite.model_dump(mode="json"), started_at=_utc(run.started_unix), started_unix=run.started_unix,
        ended_at=_utc(run.ended_unix), ended_unix=run.ended_unix, status="complete", server=server,
        modelled=True, gpu={"name": config.gpu, "count": config.tp, "modelled": True},
        sim={**server.extra["sim"], "clock": "virtual"}, workers=0, requests_total=len(records),
        requests_failed=sum(failures.values()), failures_by_kind=failures, warnings=warnings,
        points=[p.outcome() for p in run.points],
    )
    result = SimulatedRun(info=info, drive=run)
    if run_dir is not None:
        result.write(run_dir)
    return result


def write_run(run_dir: Path, info: RunInfo, records: Sequence[RequestRecord],
              scrapes: Sequence[MetricSample]) -> Path:
    """Write a raw run directory as the load stage does: ``run.json``, ``requests.jsonl`` (a record a line, in
    the order requests ended) and ``server_metrics.jsonl`` (a scrape a line; none when there is no scrape). No
    ``loadgen.jsonl``: a load generator in virtual time has nothing to measure about itself."""
    from cardgen.rundir import RunDir

    rundir = RunDir(run_dir)
    rundir.path.mkdir(parents=True, exist_ok=True)
    with rundir.requests_jsonl.open("w", encoding="utf-8") as fh:
        fh.writelines(r.model_dump_json() + "\n" for r in records)
    if scrapes:
        with rundir.server_metrics_jsonl.open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(s.model_dump(mode="json", exclude_none=True), separators=(",", ":")) + "\n"
                          for s in scrapes)
    rundir.save_run_info(info)
    return rundir.path
