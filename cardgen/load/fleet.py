"""The master's account of its load workers (run.json ``load_workers``): who each is, its clock, what it sent,
whether it kept up, and what became of it when it was lost.

Every record and sample a worker sends passes through here on its way to the recorder, put on the master's clock
(:func:`cardgen.load.clocks.to_master`) and counted against its sender. A worker lost mid-point (it stopped
answering the master's heartbeats: killed, its host or network gone) cannot say which requests it had in flight;
its last load-generator sample (at most a second old) says how many, and the master records that many as lost,
with the worker's name and the reason, in the point's current attempt (so that ``cardgen resume``, which runs the
point again as its next attempt, supersedes them with the rest of it: nothing counted twice).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from cardgen.load.clocks import ClockOffset, shift_sample, to_master
from cardgen.load.messages import Listening
from cardgen.load.workers import client_verdict
from cardgen.points import Point
from cardgen.schemas.records import ErrorKind, LoadgenSample, RequestRecord
from cardgen.schemas.run import LoadWorker, PointOutcome


@dataclass
class _Member:
    name: str
    host: str | None = None
    address: str | None = None
    clock: ClockOffset | None = None
    requests: int = 0
    lost_requests: int = 0
    samples: list[LoadgenSample] = field(default_factory=list)
    send_lags_s: list[float] = field(default_factory=list)
    in_flight: int = 0  # at its last sample
    last_sample_t: float | None = None
    lost: str | None = None
    cpus_awake: str | None = None  # what --low-latency came to on its host (None: not asked)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.address})" if self.address else self.name


class Fleet:
    """The workers of one session, by Locust client id, in the order they said they listen."""

    def __init__(self) -> None:
        self.by_node: dict[str, _Member] = {}
        self.point: Point | None = None  # the point under way, and its attempt (what lost requests belong to)
        self.attempt = 0

    def joined(self, node: str, msg: Listening) -> None:
        self.by_node.setdefault(node, _Member(name=msg.worker, host=msg.host, address=msg.address))

    def member(self, node: str) -> _Member:
        return self.by_node.setdefault(node, _Member(name=node))

    def label(self, node: str) -> str:
        return self.member(node).label

    def set_clock(self, node: str, offset: ClockOffset | None) -> None:
        self.member(node).clock = offset

    def record(self, node: str, rec: RequestRecord) -> RequestRecord:
        """``rec`` from ``node`` on the master's clock, counted."""
        m = self.member(node)
        rec = to_master(rec, m.clock)
        m.requests += 1
        if rec.scheduled_at is not None:
            m.send_lags_s.append(max(0.0, rec.sent_at - rec.scheduled_at))
        return rec

    def sample(self, node: str, sample: LoadgenSample) -> LoadgenSample:
        m = self.member(node)
        sample = shift_sample(sample, -m.clock.applied_s) if m.clock is not None else sample
        m.samples.append(sample)
        m.in_flight, m.last_sample_t = sample.in_flight or 0, sample.t
        return sample

    def is_lost(self, node: str) -> bool:
        return self.member(node).lost is not None

    def lose(self, node: str, *, why: str, at: float) -> list[RequestRecord]:
        """Mark ``node`` lost; the records of the requests it had in flight (its last sample's count)."""
        m = self.member(node)
        if m.lost is not None:
            return []
        point = self.point
        m.lost = why + (f", during point {point.name} (attempt {self.attempt})" if point is not None else "")
        if point is None:
            return []
        since = m.last_sample_t if m.last_sample_t is not None else at
        lost = [RequestRecord(scenario=point.name, kind=point.kind, group=point.group, endpoint=point.endpoint,
                              parallel=point.parallel, rate_rps=point.rate_rps,
                              prompt_tokens_target=point.prompt_tokens, output_tokens_target=point.output_tokens,
                              worker=m.name, index=-1 - i, attempt=self.attempt, sent_at=since, end_at=at,
                              error=f"lost with load worker {m.label}: {why}", error_kind=ErrorKind.LOST)
                for i in range(m.in_flight)]
        m.requests += len(lost)
        m.lost_requests += len(lost)
        return lost

    def facts(self, points: Sequence[PointOutcome] = ()) -> list[LoadWorker]:
        """Each worker's facts; whether it kept up is judged on its samples taken while ``points`` ran (its set-up
        before the first, a garbage collection of everything it imported, is not load)."""
        windows = [(p.started_unix, p.ended_unix or math.inf) for p in points if p.started_unix is not None]
        out = []
        for m in self.by_node.values():
            during = [s for s in m.samples if any(a <= s.t <= b for a, b in windows)]
            kept_up, words = client_verdict(loop_lags_s=[s.loop_lag_s for s in during],
                                            cpu_percents=[s.cpu_percent for s in during if s.cpu_percent is not None],
                                            send_lags_s=m.send_lags_s)
            c = m.clock
            out.append(LoadWorker(
                name=m.name, host=m.host, address=m.address, requests=m.requests, lost_requests=m.lost_requests,
                clock_offset_s=c.offset_s if c else None, clock_uncertainty_s=c.uncertainty_s if c else None,
                clock_round_trip_s=c.round_trip_s if c else None, clock_applied_s=c.applied_s if c else 0.0,
                kept_up=kept_up, client=words, lost=m.lost, cpus_awake=m.cpus_awake))
        return out
