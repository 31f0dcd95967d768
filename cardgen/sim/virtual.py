"""The virtual server's engine in virtual time: the same :class:`~cardgen.sim.scheduler.Scheduler` and
:class:`~cardgen.sim.metrics.SimMetrics` as the real-time server, on a clock that jumps from step to step
instead of sleeping (thousands of requests in a second).

Semantics match the real-time server: a request that arrives while a step runs joins the queue at its
arrival time and is admitted at the next step; a step starts when the previous one ends (or, when idle, at
the first arrival); every request runs to ``output_tokens`` (as with ``ignore_eos``); an ``http500`` fault
answers the n-th arrival at once, as ``--faults`` does. Clients are not modelled here: the virtual-time driver
(:mod:`cardgen.sim.drive`) sends requests as the load engine does and interleaves them with the steps
(:meth:`VirtualServer.start_step`, :meth:`VirtualServer.finish_step`).

    >>> from cardgen.sim.perf import FixedPerf
    >>> r = simulate_single(FixedPerf(), prompt_tokens=1000, output_tokens=1)
    >>> round(r.ttft_s, 3)  # step overhead + 1000 / prefill_tok_s
    0.06
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cardgen.outcome import RequestFigures
from cardgen.sim.faults import FaultPlan
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import PerfModel
from cardgen.sim.scheduler import Scheduler, Seq, SeqStatus, Step
from cardgen.sim.speculation import Speculation

#: the faults the virtual-time server injects; the others act on a live connection (drop, stall...)
VIRTUAL_FAULTS = ("http500",)


@dataclass(frozen=True, slots=True)
class VirtualRequest:
    """One finished request, times in the server's virtual seconds."""

    index: int  # arrival order, from 0
    sent: float  # reached the server
    scheduled: float  # first admitted to the running batch
    first_token: float
    end: float  # last token
    prompt_tokens: int
    output_tokens: int
    preemptions: int = 0
    group: int = 0  # the submitter's grouping (a closed-loop user...)
    times: tuple[float, ...] = ()  # when each of its chunks was emitted (end of its step): a chunk per step
    tag: Any = None  # the submitter's own data
    chunk_tokens: tuple[int, ...] = ()  # output tokens of each chunk (1 each, but with speculative decoding)
    queued: float | None = None  # joined the waiting queue, when later than ``sent`` (host time before it)
    encode_s: float | None = None  # its encoder work's time (its images), in the step that started its prefill

    @property
    def figures(self) -> RequestFigures:
        """Its figures, as the card defines them (:class:`cardgen.outcome.RequestFigures`), from the server's
        side: from when it reached the server to when its last token was emitted."""
        return RequestFigures.from_stamps(ok=True, sent_at=self.sent, first_token_at=self.first_token,
                                          end_at=self.end, output_tokens=self.output_tokens)

    @property
    def ttft_s(self) -> float:
        return self.figures.ttft_s

    @property
    def e2e_s(self) -> float:
        return self.figures.e2e_s

    @property
    def queue_s(self) -> float:
        return self.scheduled - self.sent

    def engine_metrics(self) -> dict[str, float]:
        """vLLM's per-request ``metrics`` of it, as the real-time server streams them (``cardgen.sim.live``)."""
        joined = self.sent if self.queued is None else self.queued
        out = {"time_to_first_token_ms": (self.first_token - self.scheduled) * 1000,
               "generation_time_ms": (self.end - self.first_token) * 1000,
               "queue_time_ms": (self.scheduled - joined) * 1000}
        if self.output_tokens > 1:
            out["mean_itl_ms"] = (self.end - self.first_token) / (self.output_tokens - 1) * 1000
        if self.encode_s is not None:  # the virtual server's own: no vLLM says it
            out["encode_time_ms"] = self.encode_s * 1000
        return out

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); None for a single output token."""
        tpot = self.figures.tpot_s
        return None if math.isnan(tpot) else tpot

    @property
    def speed_from_start(self) -> float:
        """Output tokens / E2E (the reference card's "generation speed")."""
        return self.figures.speed_from_start_tok_s


@dataclass(frozen=True, slots=True)
class KvSample:
    """The scheduler after one step."""

    t: float
    kv_usage: float  # 0..1
    running: int
    waiting: int


@dataclass(slots=True)
class _Served:
    """The server's own state of one request (``Seq.ctx``)."""

    index: int
    group: int
    tag: Any
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # tokens of each emission


class VirtualServer:
    """A scheduler, a virtual clock and the server's metrics.

    Either ``submit`` requests and ``step`` (or ``run``) until idle, or drive it event by event:
    :meth:`arrive` at a time, :meth:`start_step` (plans the next step at ``now``), :meth:`finish_step` (jumps to
    its end). Between the two, the scheduler shows the step in flight, as a scrape of the real server would.
    """

    def __init__(self, perf: PerfModel, *, chunked_prefill: bool = False, metrics: SimMetrics | None = None,
                 faults: FaultPlan | None = None, trace: bool = False, spec: Speculation | None = None,
                 max_loras: int | None = None, seed: int = 0) -> None:
        self.scheduler = Scheduler(perf, chunked_prefill=chunked_prefill, spec=spec, max_loras=max_loras, seed=seed)
        self.metrics = metrics
        self.faults = faults or FaultPlan()
        unsupported = sorted(set(self.faults.every) - set(VIRTUAL_FAULTS))
        if unsupported:
            raise ValueError(f"the virtual-time server injects {', '.join(VIRTUAL_FAULTS)} only, not "
                             f"{', '.join(unsupported)}")
        self.now = 0.0
        self.in_flight: Step | None = None
        self.finished: list[VirtualRequest] = []
        self.keep_finished = True  # every finished request in ``finished`` (a driver that reads finish_step's does not)
        self.trace: list[KvSample] | None = [] if trace else None
        self.max_kv_usage = 0.0
        self.arrivals = 0  # generation requests that reached the server (what faults count)

    # --- requests ------------------------------------------------------------------------------------------
    def arrive(self, prompt_tokens: int, output_tokens: int, *, at: float | None = None, group: int = 0,
               tag: Any = None, block_hashes: tuple[int, ...] = (), adapter: str | None = None,
               received: float | None = None, encode_flops: float = 0.0,
               decode_factor: float = 1.0) -> Seq | None:
        """A request joins the queue at ``at`` (default: now; never before now when idle), having reached the
        server at ``received`` (None: at ``at``). It queues; or, when a fault answers it at once, None. An arrival time before now stands for a request that came while
        the step in flight ran: it is admitted at the next step, as in real time. ``encode_flops``: its encoder
        work before its prefill (:attr:`cardgen.sim.scheduler.Seq.encode_flops`); ``decode_factor``: its decode
        steps' time relative to a plain request's (:attr:`cardgen.sim.scheduler.Seq.decode_factor`)."""
        if at is not None and self.in_flight is None:
            self.now = max(self.now, at)
        when = self.now if at is None else at
        index = self.arrivals
        self.arrivals += 1
        fault = self.faults.fault_for(index + 1) if self.faults else None
        if fault is not None:
            if self.metrics is not None:
                self.metrics.count_fault(fault)
            return None
        seq = Seq(prompt_tokens, output_tokens, ctx=_Served(index, group, tag), block_hashes=block_hashes,
                  adapter=adapter, received_s=received, encode_flops=encode_flops, decode_factor=decode_factor)
        return self.scheduler.add(seq, when)

    def submit(self, prompt_tokens: int, output_tokens: int, *, at: float | None = None, group: int = 0) -> Seq:
        """:meth:`arrive` for a request no fault may answer."""
        seq = self.arrive(prompt_tokens, output_tokens, at=at, group=group)
        if seq is None:
            raise RuntimeError("a fault answered a request submitted with submit(); use arrive()")
        return seq

    # --- steps ---------------------------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def start_step(self) -> Step | None:
        """Plan the next step at ``now``; None when nothing can run (idle, or waiting for blocks)."""
        if self.in_flight is not None:
            raise RuntimeError("finish_step() the step in flight first")
        self.in_flight = self.scheduler.next_step(self.now)
        return self.in_flight

    def finish_step(self) -> list[VirtualRequest]:
        """Jump to the end of the step in flight and apply it; return the requests it finished."""
        step = self.in_flight
        if step is None:
            raise RuntimeError("no step in flight")
        self.in_flight = None
        sched = self.scheduler
        emitted = sched.finish_step(step)
        now = self.now = step.end_s
        metrics = self.metrics
        done = []
        held = 0
        finished = SeqStatus.FINISHED
        if metrics is not None:
            metrics.observe_tokens(emitted)
        for seq in emitted:
            served = seq.ctx
            served.times.append(now)
            served.counts.append(seq.emitted)
            if seq.status >= finished:  # Seq.finished, inlined: once per token of every request
                held += sched.blocks_for(seq.computed)
                done.append(self._record(seq))
        # KV usage during the step: what the finished sequences held is already released; count it back
        usage = (sched.used_blocks + held) / sched.total_blocks
        self.max_kv_usage = max(self.max_kv_usage, usage)
        if self.trace is not None:
            self.trace.append(KvSample(self.now, usage, len(sched.running), len(sched.waiting)))
        if self.keep_finished:
            self.finished.extend(done)
        return done

    def decode_run(self, horizon: float,
                   each: Callable[[float], None] | None = None) -> tuple[bool, list[VirtualRequest]]:
        """Steps that only decode, from ``now`` to before ``horizon``, applied at once
        (:meth:`cardgen.sim.scheduler.Scheduler.decode_run`: the same tokens, times and metrics as step by step);
        ``each(kv_usage)`` is told of each as it starts. Whether the step after them is left in flight (it ends at
        or after ``horizon``; else the next step is to be started as usual), and the requests the last of them
        finished (as :meth:`finish_step` returns them: the run stops there)."""
        if self.in_flight is not None:
            raise RuntimeError("finish_step() the step in flight first")
        sched = self.scheduler
        run = sched.decode_run(self.now, horizon)
        if run is None:
            return False, []
        ends = run.ends
        done: list[VirtualRequest] = []
        if ends:
            total = sched.total_blocks
            usages = [(total - free) / total for free in run.free]  # as kv_usage reads after each step's growth
            if each is not None:
                for usage in usages:
                    each(usage)
            ones = [1] * len(ends)
            for seq in run.seqs:
                served = seq.ctx
                served.times += ends
                served.counts += ones
            metrics = self.metrics
            if metrics is not None:
                metrics.observe_decode_run(run.last_token_s, ends, len(run.seqs), run.lasts)
            if run.finished:  # the last step's usage as finish_step counts it: what they held counted back
                held = 0
                for seq in run.finished:
                    if metrics is not None:
                        metrics.observe_finished(seq)
                    held += sched.blocks_for(seq.computed)
                    done.append(self._record(seq))
                usages[-1] = (sched.used_blocks + held) / total
            self.max_kv_usage = max(self.max_kv_usage, *usages)
            if self.trace is not None:
                waiting = len(sched.waiting)
                counts = [len(run.seqs)] * len(ends)
                counts[-1] = len(sched.running)  # after those the last step finished, as finish_step traces it
                self.trace.extend(KvSample(t, usage, running, waiting)
                                  for t, usage, running in zip(ends, usages, counts, strict=True))
            self.now = ends[-1]
            if self.keep_finished:
                self.finished.extend(done)
        if run.in_flight is None:
            return False, done
        self.in_flight = run.in_flight
        if each is not None:
            each(sched.kv_usage)
        return True, done

    def step(self, *, not_before: float | None = None) -> list[VirtualRequest]:
        """Run one step (starting at ``not_before`` if later than now); return the requests it finished."""
        if not_before is not None:
            self.now = max(self.now, not_before)
        if self.start_step() is None:
            return []
        return self.finish_step()

    def run(self) -> list[VirtualRequest]:
        """Step until nothing is left; return every request finished so far, in finishing order."""
        while self.has_work:
            if self.start_step() is None:
                raise RuntimeError("requests wait for KV blocks that nothing running will free")
            self.finish_step()
        return self.finished

    def _record(self, seq: Seq) -> VirtualRequest:
        served: _Served = seq.ctx
        assert seq.first_token_s is not None and seq.end_s is not None and seq.scheduled_s is not None
        return VirtualRequest(
            index=served.index,
            sent=seq.arrival_s if seq.received_s is None else seq.received_s,
            queued=seq.arrival_s if seq.received_s is not None else None,
            scheduled=seq.scheduled_s,
            first_token=seq.first_token_s,
            end=seq.end_s,
            prompt_tokens=seq.prompt_tokens,
            output_tokens=seq.output_tokens,
            preemptions=seq.preemptions,
            group=served.group,
            times=tuple(served.times),
            tag=served.tag,
            chunk_tokens=tuple(served.counts),
            encode_s=seq.encode_s,
        )


def simulate_single(perf: PerfModel, *, prompt_tokens: int, output_tokens: int) -> VirtualRequest:
    """One request alone on an idle server."""
    sim = VirtualServer(perf)
    sim.submit(prompt_tokens, output_tokens)
    return sim.run()[0]
