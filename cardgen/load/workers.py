"""``--workers auto``: how many Locust worker processes a run's points need, and whether the client kept up.

One process stamps every chunk it reads on one event loop. A batching server answers all its streams in the
same instant, so a process with ``n`` streams stamps the last chunk of such a burst ``n`` times its CPU per chunk
late; and averaged over time it must not come near a full core. Auto asks for enough processes that neither
happens at the busiest point of the suite, within this machine's cores::

    streams   = the most streams one point keeps open, as its kind says (``Kind.streams``: users kept in flight;
                an open loop's rate x a request's duration)
    by_burst  = streams x CPU per chunk / BURST_BUDGET_S
    by_rate   = streams x STREAM_CHUNKS_S x CPU per chunk / CORE_SHARE
    workers   = 0 (one process) when both are at most 1, else min(max of both, cores)

The CPU per chunk is the client's, measured by ``make bench`` (bench_client, the marginal method); the chunk
rate of one stream is an assumption (a fast GPU's decode), since the server has not been measured yet. A barrier
kind's points (``Program.barrier``) run in one process whatever the count (their barriers must not be spread), so
they do not count. Whether the client then did keep up is judged per point afterwards (:func:`client_verdict`), on
what the load generator measured of itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cardgen.kinds import kind_of, runs_on
from cardgen.points import Point

CLIENT_CPU_PER_CHUNK_S = 20e-6  # client CPU per chunk, all its processes: 17-19 us measured at 256 streams (bench_client)
STREAM_CHUNKS_S = 100.0  # assumed chunks per second of one stream: 10 ms between tokens
BURST_BUDGET_S = 0.001  # the latest a process may stamp the last chunk of a burst
CORE_SHARE = 0.5  # the most of a core a process may use on average

LOOP_LAG_LIMIT_S = 0.010  # p95 of the worst event-loop lag per second
CPU_LIMIT_PERCENT = 90.0  # of one core, any process, any second
SEND_LAG_LIMIT_S = 0.010  # p99 of how late open-loop requests left after their scheduled time


@dataclass(frozen=True)
class WorkerChoice:
    workers: int
    reason: str


def peak_streams(point: Point) -> int:
    """The most streams ``point`` keeps open at once over all processes, as its kind counts them (0 for the kinds
    that never split)."""
    if not runs_on(point, 1):  # a barrier kind: never split
        return 0
    return kind_of(point).open_streams(point, STREAM_CHUNKS_S)


def choose_workers(points: Sequence[Point], *, cores: int) -> WorkerChoice:
    """The worker processes for ``points`` on a machine with ``cores`` cores (see the module docstring)."""
    busiest = max(points, key=peak_streams, default=None)
    streams = peak_streams(busiest) if busiest is not None else 0
    by_burst = math.ceil(streams * CLIENT_CPU_PER_CHUNK_S / BURST_BUDGET_S)
    by_rate = math.ceil(streams * STREAM_CHUNKS_S * CLIENT_CPU_PER_CHUNK_S / CORE_SHARE)
    need = max(by_burst, by_rate)
    basis = (f"up to {streams} streams ({busiest.name if busiest is not None else 'no point'}) at "
             f"{CLIENT_CPU_PER_CHUNK_S * 1e6:g} us of client CPU per chunk: a burst of them takes "
             f"{streams * CLIENT_CPU_PER_CHUNK_S * 1e3:.1f} ms to stamp (at most {BURST_BUDGET_S * 1e3:g} ms per "
             f"process), and at {STREAM_CHUNKS_S:g} chunks/s per stream {streams * STREAM_CHUNKS_S:.0f} chunks/s "
             f"need {streams * STREAM_CHUNKS_S * CLIENT_CPU_PER_CHUNK_S:.2f} cores (at most {CORE_SHARE:g} per "
             "process)")
    if need <= 1:
        return WorkerChoice(0, f"auto: one process; {basis}")
    workers = min(need, max(cores, 1))
    capped = f", capped at this machine's {cores} cores" if workers < need else ""
    return WorkerChoice(workers, f"auto: {workers} worker processes (needed {need}{capped}); {basis}")


def client_verdict(*, loop_lags_s: Sequence[float], cpu_percents: Sequence[float],
                   send_lags_s: Sequence[float]) -> tuple[bool | None, str | None]:
    """Whether the client kept up during a point, and the figures that say so: the p95 of its event loops'
    worst lag per second, the most CPU any of its processes used in a second, and (open loop) the p99 of how
    late requests left. None when nothing was measured (a point too short for one sample)."""
    if not loop_lags_s and not send_lags_s:
        return None, None
    figures = [  # (words, value, limit) of what was measured
        (f"event-loop lag p95 {_percentile(loop_lags_s, 95) * 1e3:.1f} ms", _percentile(loop_lags_s, 95),
         LOOP_LAG_LIMIT_S) if loop_lags_s else None,
        (f"CPU max {max(cpu_percents):.0f} %", max(cpu_percents), CPU_LIMIT_PERCENT) if cpu_percents else None,
        (f"send lag p99 {_percentile(send_lags_s, 99) * 1e3:.1f} ms", _percentile(send_lags_s, 99),
         SEND_LAG_LIMIT_S) if send_lags_s else None,
    ]
    parts = [words for words, _, _ in filter(None, figures)]
    behind = [words for words, value, limit in filter(None, figures) if value > limit]
    if behind:
        return False, "fell behind: " + ", ".join(behind) + (
            f" (limits: lag p95 {LOOP_LAG_LIMIT_S * 1e3:g} ms, CPU {CPU_LIMIT_PERCENT:g} %, send lag p99 "
            f"{SEND_LAG_LIMIT_S * 1e3:g} ms)")
    return True, "kept up: " + ", ".join(parts)


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q))
