"""Each load worker's clock against the master's: measured before the load, applied to every stamp it sends.

A worker stamps what it measures (a request's send, each chunk's kernel receive stamp, its loop-lag samples) with
its own host's ``CLOCK_REALTIME``; the master compares those stamps with its own (the scrape windows of
``/metrics``, the time-goes split per window, the KV usage in flight at a scrape) and the server's. Two hosts kept
by NTP differ by a millisecond to tens of milliseconds, so the master measures each worker's offset over its own
channel, NTP's way, before any point starts::

    master  t0 ──ClockPing──▶ t1  worker
    master  t3 ◀──ClockPong── t2  worker       offset  θ = ((t1 - t0) + (t2 - t3)) / 2
                                               round trip δ = (t3 - t0) - (t2 - t1)

Whatever the two legs take, the true offset lies in ``θ ± δ/2``. Of :data:`PINGS` exchanges the
:data:`KEPT` with the shortest round trips are kept (a long one met a busy event loop on the way) and their
intervals intersected: the estimate is the middle of the intersection, the uncertainty its half-width (where the
intervals do not meet, the shortest round trip's own interval). The master then shifts every stamp the worker
sends by minus the offset (:func:`to_master`) as it arrives, so that ``requests.jsonl`` and ``loadgen.jsonl``
hold the master's clock throughout, and run.json says per worker what was applied. An offset no larger than its
uncertainty is not told apart from zero and not applied (hosts sharing one clock, as the tests' network
namespaces do, are left as they are).

A test seam stands for a host whose clock is off: ``CARDGEN_CLOCK_SHIFT_S=0.25`` in a worker's environment adds
0.25 s to every stamp that worker gives (its pongs, records, samples, ``Done``), as a clock 0.25 s fast would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cardgen.schemas.records import LoadgenSample, RequestRecord

SHIFT_ENV = "CARDGEN_CLOCK_SHIFT_S"
PINGS = 16  # exchanges per worker, before the load
KEPT = 4  # of those, the shortest round trips kept
PONG_TIMEOUT_S = 2.0  # a pong not back by then is not waited for (a slow link still gives the others)


@dataclass(frozen=True)
class Exchange:
    """One ping and its pong: master send (t0), worker receive (t1), worker send (t2), master receive (t3)."""

    t0: float
    t1: float
    t2: float
    t3: float

    @property
    def offset_s(self) -> float:
        return ((self.t1 - self.t0) + (self.t2 - self.t3)) / 2

    @property
    def round_trip_s(self) -> float:
        return max((self.t3 - self.t0) - (self.t2 - self.t1), 0.0)


@dataclass(frozen=True)
class ClockOffset:
    """A worker's clock minus the master's (seconds), how far off that may be, and what the master applies."""

    offset_s: float
    uncertainty_s: float
    round_trip_s: float  # the shortest round trip seen
    exchanges: int  # pongs that came back

    @property
    def applied_s(self) -> float:
        """The shift the master takes off the worker's stamps: the offset, or 0 when it is within its uncertainty."""
        return self.offset_s if abs(self.offset_s) > self.uncertainty_s else 0.0

    def words(self) -> str:
        applied = "corrected" if self.applied_s else "not told apart from 0, not corrected"
        return (f"{self.offset_s * 1e3:+.3f} ms ± {self.uncertainty_s * 1e3:.3f} ms ({applied}; {self.exchanges} "
                f"exchanges, shortest round trip {self.round_trip_s * 1e3:.3f} ms)")


def estimate(exchanges: Sequence[Exchange], *, kept: int = KEPT) -> ClockOffset | None:
    """The offset from ``exchanges`` (see the module docstring); None when there are none."""
    if not exchanges:
        return None
    best = sorted(exchanges, key=lambda e: e.round_trip_s)[:max(kept, 1)]
    low = max(e.offset_s - e.round_trip_s / 2 for e in best)
    high = min(e.offset_s + e.round_trip_s / 2 for e in best)
    if low > high:  # the intervals do not meet (a leg's delay changed between exchanges): the shortest alone
        low, high = best[0].offset_s - best[0].round_trip_s / 2, best[0].offset_s + best[0].round_trip_s / 2
    return ClockOffset(offset_s=(low + high) / 2, uncertainty_s=(high - low) / 2,
                       round_trip_s=best[0].round_trip_s, exchanges=len(exchanges))


def shift_from_env() -> float:
    """The test seam's shift of this process's stamps, from ``CARDGEN_CLOCK_SHIFT_S`` (0 when unset or bad)."""
    try:
        return float(os.environ.get(SHIFT_ENV, "0") or 0)
    except ValueError:
        return 0.0


def now(shift_s: float = 0.0) -> float:
    """This host's clock, as the seam makes it."""
    return time.time() + shift_s


def _by(t: float | None, by_s: float) -> float | None:
    return None if t is None else t + by_s


def shift_record(rec: RequestRecord, by_s: float) -> RequestRecord:
    """``rec`` with every stamp moved by ``by_s`` seconds (durations, counts and the server's own figures kept)."""
    if not by_s:
        return rec
    return rec.model_copy(update={
        "scheduled_at": _by(rec.scheduled_at, by_s), "sent_at": rec.sent_at + by_s,
        "headers_at": _by(rec.headers_at, by_s), "first_token_at": _by(rec.first_token_at, by_s),
        "first_answer_at": _by(rec.first_answer_at, by_s), "end_at": _by(rec.end_at, by_s),
        "chunk_times": [t + by_s for t in rec.chunk_times]})


def shift_sample(sample: LoadgenSample, by_s: float) -> LoadgenSample:
    return sample.model_copy(update={"t": sample.t + by_s}) if by_s else sample


def to_master(rec: RequestRecord, offset: ClockOffset | None) -> RequestRecord:
    """A worker's record on the master's clock."""
    return shift_record(rec, -offset.applied_s) if offset is not None else rec
