"""The virtual server's engine loop, in real time::

    plan a step -> sleep until its modelled end -> write every emitted token -> plan the next step

Tokens are written straight to each response's transport by the driver, from SSE frames pre-encoded when the
request arrived (:class:`~cardgen.sim.live.Live`): no per-token task wake-up, no JSON encoding in the hot path.
The wait for a step's end sleeps on the event loop (whose timer rounds up to whole milliseconds) until
``fine_sleep_s`` before the deadline, then blocks in ``time.sleep`` (microsecond timer) for the rest.

A driver that breaks stops the server (``on_failure``) and says so in one line on stderr (the traceback only
with ``CARDGEN_DEBUG``, as :mod:`cardgen.cli.main` does): a server whose engine is dead must not go on
accepting requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aiohttp import web

from cardgen.sim.config import SimConfig, build_perf, cache_config_labels, max_model_len
from cardgen.sim.live import Live, request_metrics
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import PerfModel
from cardgen.sim.scheduler import Scheduler, Seq
from cardgen.sim.sse import DONE, NWORDS, event, frame
from cardgen.sim.stamps import StampLog, stamp_record
from cardgen.sim.validate import error_body

MAX_CATCH_UP_S = 1.0  # a driver later than this (the process was stopped) restarts the clock instead


class Engine:
    """The engine loop of the virtual server, in real time: a :class:`Scheduler` over the modelled step times,
    the tokens it emits written to each response's transport, its metrics, faults and stamp log. Started and
    stopped with the HTTP app (:meth:`start`, :meth:`stop`); requests join with :meth:`submit`."""

    def __init__(self, config: SimConfig, perf: PerfModel | None = None) -> None:
        self.config = config
        self.perf = perf if perf is not None else build_perf(config)
        self.max_model_len = max_model_len(config, self.perf)
        self.scheduler = Scheduler(self.perf, chunked_prefill=bool(config.chunked_prefill),
                                   **config.scheduler_options())
        cache = cache_config_labels(self.perf, max_len=self.max_model_len) if config.cache_config else None
        self.metrics = SimMetrics(model_name=config.model_name, cache_config=cache)
        self.faults = config.faults
        self.stamp_log = StampLog(config.stamp_log) if config.stamp_log else None
        self._live: set[Live] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._wall_offset = 0.0
        self.failed: BaseException | None = None
        self.on_failure: Callable[[], None] | None = None

    async def start(self, app: web.Application) -> None:
        """Start the driver (and the stamp log's writer) on the running loop (the app's ``on_startup``)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._wall_offset = time.time() - loop.time()
        self._tasks.append(asyncio.create_task(self._drive(), name="cardgen-sim-driver"))
        if self.stamp_log is not None:
            self._tasks.append(asyncio.create_task(self._flush_stamps(), name="cardgen-sim-stamps"))

    async def stop(self, app: web.Application) -> None:
        """Stop the driver, end every request still open, close the stamp log (the app's ``on_shutdown``)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for live in list(self._live):
            if live.seq is not None and live.queued:
                self.scheduler.abort(live.seq, self._loop.time())
            if live.transport is not None:
                live.transport.close()
            live.resolve("shutdown")
        if self.stamp_log is not None:
            self.stamp_log.close()

    @contextmanager
    def tracked(self, live: Live) -> Iterator[None]:
        """While a request's handler runs: the engine knows it (and ends it at shutdown); a cancelled handler
        (the client went away, or the server is stopping) frees its blocks at once."""
        self._live.add(live)
        try:
            yield
        except asyncio.CancelledError:
            self._abort(live)
            raise
        finally:
            self._live.discard(live)

    async def submit(self, live: Live) -> str:
        """Queue a request's sequence and wait for its outcome (``ok``, ``dropped``, ``error_event``...)."""
        assert live.seq is not None
        self.scheduler.add(live.seq, self._loop.time())
        live.arrived = time.time()
        live.queued = True
        self._wake.set()
        return await live.done

    def _abort(self, live: Live) -> None:
        """The client went away: free the sequence's blocks at once."""
        seq = live.seq
        if seq is None or seq.finished:
            return
        if live.queued:
            self.scheduler.abort(seq, self._loop.time())
        self.stamp(live, seq, aborted=True)
        live.resolve("aborted")

    def stamp(self, live: Live, seq: Seq | None, *, aborted: bool = False) -> None:
        if self.stamp_log is not None:
            self.stamp_log.add(stamp_record(live, seq, aborted=aborted))

    # --- the engine loop -------------------------------------------------------------------------------------
    async def _drive(self) -> None:
        try:
            await self._drive_loop()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a broken driver must not leave a server that accepts requests
            self.failed = exc
            print(f"cardgen-sim: the engine loop failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            if os.environ.get("CARDGEN_DEBUG"):
                traceback.print_exc(file=sys.stderr)
            if self.on_failure is not None:
                self.on_failure()
            raise

    async def _drive_loop(self) -> None:
        loop = self._loop
        sched = self.scheduler
        wake = self._wake
        fine = self.config.fine_sleep_s
        sleep = asyncio.sleep
        clock = loop.time
        prev_end = clock()
        busy = False  # the last step ran back to back with this one
        while True:
            if not sched.has_work:
                busy = False
                wake.clear()
                await wake.wait()
                continue
            now = clock()
            # back to back, a step starts when the previous one ended in modelled time, however late this loop
            # is: lateness shows in the emission lag and never accumulates into the modelled timeline
            start = prev_end if busy and now - prev_end < MAX_CATCH_UP_S else now
            step = sched.next_step(start)
            if step is None:  # only waiting requests that cannot be admitted yet: wait for a change
                busy = False
                wake.clear()
                await wake.wait()
                continue
            busy = True
            deadline = step.end_s
            remaining = deadline - clock()
            if remaining > fine:
                await sleep(remaining - fine)
                remaining = deadline - clock()
            if remaining > 0:
                time.sleep(remaining)  # blocks the loop for at most fine_sleep_s (+ the loop timer's slack)
            emitted = sched.finish_step(step)
            self._emit(deadline + self._wall_offset, emitted)
            prev_end = deadline
            # let requests that came during the blocking sleep join the queue before the next step is planned
            await sleep(0)

    def _emit(self, target_wall: float, emitted: list[Seq]) -> None:
        """Write every emitted token; the common case (one streamed token mid-way) is the first branch."""
        now = time.time
        observe_lag = self.metrics.observe_lag
        observe_itl = self.metrics.itl.observe
        for seq in emitted:
            live: Live = seq.ctx
            n = seq.output_tokens
            if n < live.next_special and seq.emitted == 1 and seq.gap_s is not None:  # a gap: from the second
                observe_itl(seq.gap_s)
                t = now()
                if live.framed and live.transport is not None:  # framed where the stream was prepared
                    live.transport.write(live.framed[n % NWORDS])
                    observe_lag(t - target_wall)
                live.times.append(t)
            else:
                self._emit_special(seq, live, n, target_wall)

    def _emit_special(self, seq: Seq, live: Live, n: int, target_wall: float) -> None:  # one chunk
        """First token, last token, a fault, a turn of the reasoning's span, or several tokens in one step
        (speculative decoding): one chunk with every token the step gave."""
        metrics = self.metrics
        first = n - seq.emitted + 1  # the step's first token
        if n == 1:
            metrics.observe_first_token(seq)
        elif seq.gap_s is not None:  # always, from the second token
            metrics.itl.observe(seq.gap_s)
        stream = bool(live.framed)
        transport = live.transport
        out: list[bytes] = []
        if live.fault_at and first <= live.fault_at <= n:
            fault = live.fault
            if fault == "malformed":
                if stream:
                    out.append(b'data: {"id":"' + live.id.encode() + b'","choices":[{"index":0,"text":\n\n')
                live.malformed = True
            elif fault in ("drop", "error_event", "stall"):
                self.scheduler.abort(seq, self._loop.time())
                if fault == "error_event" and stream:
                    err = json.dumps(error_body(500, "injected fault (error_event)", "InternalServerError"))
                    assert transport is not None
                    transport.write(frame(event(err) + DONE))
                if fault == "drop" and transport is not None:
                    transport.close()
                self.stamp(live, seq)
                if fault == "stall":
                    self._loop.call_later(self.faults.stall_s, self._end_stall, live)
                else:
                    live.resolve("dropped" if fault == "drop" else "error_event")
                return
        if stream:
            if n == 1 and live.params.chat:
                out.append(event(live.role_chunk()))
            text, reasoning = live.texts(first, n)
            out.append(event(live.chunk(text, seq.finish_reason if seq.finished else None, reasoning)))
            if seq.finished:
                if live.params.include_usage:
                    out.append(event(live.usage_chunk(n, request_metrics(seq))))
                out.append(DONE)
            t = time.time()
            assert transport is not None
            transport.write(frame(b"".join(out)))
            metrics.observe_lag(t - target_wall)
        else:
            t = time.time()
        live.times.append(t)
        live.extra_tokens += seq.emitted - 1
        if seq.finished:
            metrics.observe_finished(seq)
            self.stamp(live, seq)
            live.resolve("ok")
            return
        if live.answer_framed and n >= live.thinking.last:  # the reasoning is over: the answer's events from now
            live.framed, live.answer_framed = live.answer_framed, ()
        candidates = [seq.max_tokens]
        if seq.stop_at is not None:
            candidates.append(seq.stop_at)
        if live.fault_at > n:
            candidates.append(live.fault_at)
        if live.thinking.last > n:  # the reasoning's last token (the closing tag, in a completion's text)
            candidates.append(live.thinking.last)
        live.next_special = min(candidates)

    def _end_stall(self, live: Live) -> None:
        if live.transport is not None:
            live.transport.close()
        live.resolve("stalled")

    async def _flush_stamps(self) -> None:
        assert self.stamp_log is not None
        while True:
            await asyncio.sleep(0.5)
            await self.stamp_log.drain()
