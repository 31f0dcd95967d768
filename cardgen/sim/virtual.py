"""The virtual server in virtual time: the same :class:`~cardgen.sim.scheduler.Scheduler` driven by a
discrete-event loop, with no sleeping, for analysis and calibration (thousands of requests in a second).

Semantics match the real-time server: a request that arrives while a step runs joins the queue at its
arrival time and is admitted at the next step; a step starts when the previous one ends (or, when idle, at
the first arrival); every request runs to ``output_tokens`` (as with ``ignore_eos``). Network and client
costs are zero.

    >>> from cardgen.sim.perf import FixedPerf
    >>> r = simulate_single(FixedPerf(), prompt_tokens=1000, output_tokens=1)
    >>> round(r.ttft_s, 3)  # step overhead + 1000 / prefill_tok_s
    0.06
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cardgen.sim.perf import PerfModel
from cardgen.sim.scheduler import Scheduler, Seq


@dataclass(frozen=True, slots=True)
class VirtualRequest:
    """One finished request, times in virtual seconds from the start of the simulation."""

    index: int  # submission order, from 0
    sent: float
    scheduled: float  # first admitted to the running batch
    first_token: float
    end: float  # last token
    prompt_tokens: int
    output_tokens: int
    preemptions: int = 0
    group: int = 0  # wave number (simulate_waves), user number (closed loop), else 0

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.sent

    @property
    def e2e_s(self) -> float:
        return self.end - self.sent

    @property
    def queue_s(self) -> float:
        return self.scheduled - self.sent

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); None for a single output token."""
        return (self.end - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else None

    @property
    def speed_from_start(self) -> float:
        """Output tokens / E2E (the reference card's "generation speed")."""
        return self.output_tokens / self.e2e_s


@dataclass(frozen=True, slots=True)
class KvSample:
    """The scheduler after one step."""

    t: float
    kv_usage: float  # 0..1
    running: int
    waiting: int


class VirtualServer:
    """A scheduler and a virtual clock. ``submit`` requests, then ``step`` (or ``run``) until idle."""

    def __init__(self, perf: PerfModel, *, chunked_prefill: bool = False, trace: bool = False) -> None:
        self.scheduler = Scheduler(perf, chunked_prefill=chunked_prefill)
        self.now = 0.0
        self.finished: list[VirtualRequest] = []
        self.trace: list[KvSample] | None = [] if trace else None
        self.max_kv_usage = 0.0
        self._submitted = 0

    def submit(
        self, prompt_tokens: int, output_tokens: int, *, at: float | None = None, group: int = 0
    ) -> Seq:
        """Queue a request that arrived at ``at`` (default: now). An arrival time before now stands for a request
        that came while the last step ran: it is admitted at the next step, as in real time."""
        when = self.now if at is None else at
        seq = Seq(prompt_tokens, output_tokens, ctx=(self._submitted, group))
        self._submitted += 1
        return self.scheduler.add(seq, when)

    def step(self, *, not_before: float | None = None) -> list[VirtualRequest]:
        """Run one step (starting at ``not_before`` if later than now); return the requests it finished."""
        start = self.now if not_before is None else max(self.now, not_before)
        step = self.scheduler.next_step(start)
        if step is None:
            return []
        emitted = self.scheduler.finish_step(step)
        self.now = step.end_s
        sched = self.scheduler
        done = [self._record(seq) for seq in emitted if seq.finished]
        # KV usage during the step: what the finished sequences held is already released; count it back
        held = sum(sched.blocks_for(s.computed) for s in emitted if s.finished)
        usage = (sched.used_blocks + held) / sched.total_blocks
        self.max_kv_usage = max(self.max_kv_usage, usage)
        if self.trace is not None:
            self.trace.append(KvSample(self.now, usage, len(sched.running), len(sched.waiting)))
        self.finished.extend(done)
        return done

    def run(self) -> list[VirtualRequest]:
        """Step until nothing is left; return every request finished so far, in finishing order."""
        while self.scheduler.has_work:
            self.step()
        return self.finished

    def _record(self, seq: Seq) -> VirtualRequest:
        index, group = seq.ctx
        assert seq.first_token_s is not None and seq.end_s is not None and seq.scheduled_s is not None
        return VirtualRequest(
            index=index,
            sent=seq.arrival_s,
            scheduled=seq.scheduled_s,
            first_token=seq.first_token_s,
            end=seq.end_s,
            prompt_tokens=seq.prompt_tokens,
            output_tokens=seq.output_tokens,
            preemptions=seq.preemptions,
            group=group,
        )


def simulate_single(perf: PerfModel, *, prompt_tokens: int, output_tokens: int) -> VirtualRequest:
    """One request alone on an idle server."""
    sim = VirtualServer(perf)
    sim.submit(prompt_tokens, output_tokens)
    return sim.run()[0]


def simulate_closed_loop(
    perf: PerfModel,
    *,
    prompt_tokens: int,
    output_tokens: int,
    parallel: int,
    num_requests: int,
    chunked_prefill: bool = False,
) -> list[VirtualRequest]:
    """``parallel`` users, each sending its next request the moment its previous one ends, until
    ``num_requests`` were sent; all start at time 0. Returned in submission order."""
    if parallel < 1 or num_requests < 1:
        raise ValueError("parallel and num_requests must be at least 1")
    sim = VirtualServer(perf, chunked_prefill=chunked_prefill)
    sent = 0
    for user in range(min(parallel, num_requests)):
        sim.submit(prompt_tokens, output_tokens, group=user)
        sent += 1
    while sim.scheduler.has_work:
        for done in sim.step():
            if sent < num_requests:
                sim.submit(prompt_tokens, output_tokens, group=done.group)
                sent += 1
    return sorted(sim.finished, key=lambda r: r.index)


def simulate_arrivals(
    perf: PerfModel, arrivals: Iterable[tuple[float, int, int]], *, chunked_prefill: bool = False
) -> list[VirtualRequest]:
    """Open loop: each ``(time_s, prompt_tokens, output_tokens)`` arrives at its time whatever the server
    does. Returned in submission (arrival) order."""
    pending = [(t, i, p, o) for i, (t, p, o) in enumerate(arrivals)]
    heapq.heapify(pending)
    sim = VirtualServer(perf, chunked_prefill=chunked_prefill)
    while pending or sim.scheduler.has_work:
        if not sim.scheduler.has_work:
            sim.now = max(sim.now, pending[0][0])
        while pending and pending[0][0] <= sim.now:
            t, _, p, o = heapq.heappop(pending)
            sim.submit(p, o, at=t)
        sim.step()
    return sorted(sim.finished, key=lambda r: r.index)


def simulate_open_loop(
    perf: PerfModel,
    *,
    prompt_tokens: int,
    output_tokens: int,
    rate_rps: float,
    num_requests: int,
    seed: int = 0,
    chunked_prefill: bool = False,
) -> list[VirtualRequest]:
    """Poisson arrivals at ``rate_rps`` (exponential gaps, seeded)."""
    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(num_requests):
        arrivals.append((t, prompt_tokens, output_tokens))
        t += rng.expovariate(rate_rps)
    return simulate_arrivals(perf, arrivals, chunked_prefill=chunked_prefill)


def simulate_waves(
    perf: PerfModel,
    *,
    prompt_tokens: int,
    output_tokens: int,
    waves: Sequence[int],
    gap_s: float = 0.0,
    chunked_prefill: bool = False,
) -> list[VirtualRequest]:
    """Growing waves, as the reference card measures KV capacity: ``waves[k]`` requests sent at once, the
    next wave ``gap_s`` after the last request of this one ended. ``group`` is the wave number."""
    sim = VirtualServer(perf, chunked_prefill=chunked_prefill)
    for k, size in enumerate(waves):
        sim.now += gap_s if k else 0.0
        for _ in range(size):
            sim.submit(prompt_tokens, output_tokens, group=k)
        sim.run()
    return sorted(sim.finished, key=lambda r: r.index)
