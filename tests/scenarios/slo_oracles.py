"""Servers whose SLO limit is known exactly, and a small interpreter that runs the SLO search's program against
them in virtual time: fast enough for the hundreds of seeded searches a coverage figure needs (the virtual
server runs the same programs request by request, step by step: tests/scenarios/test_slo_search.py).

- :class:`MD1`: one request at a time, each for exactly ``service_s`` (its first token after ``first_s``), fed by
  the open loop's Poisson arrivals: an M/D/1 queue, whose waiting-time distribution Erlang gave in 1909
  (:func:`md1_waiting_cdf`), so the rate at which a percentile of TTFT crosses a threshold is computed to 40
  digits without simulating (:func:`md1_limit`).
- :class:`Lockstep`: a closed loop's users move together: every round is one prefill step then ``steps`` decode
  steps, each ``overhead_s + per_user_s x users`` times ``1 + jitter x N(0, 1)`` (seeded), so a round's TPOT is
  that base times ``1 + jitter x N(0, 1 / steps)``, the same for every request of the round, and a percentile of
  TPOT over requests is that base times ``1 + jitter x z_p / sqrt(steps)`` (:meth:`Lockstep.percentile_s`): the
  highest concurrency within a threshold is arithmetic (:meth:`Lockstep.limit`); :class:`Plateau` is one whose
  percentile stays on its threshold over a range of users.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
from dataclasses import dataclass
from decimal import Decimal, getcontext
from statistics import NormalDist

from cardgen.kinds.program import Send, record_fields
from cardgen.kinds.slosearch.program import SloProgram
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord


def md1_waiting_cdf(t: float, rate: float, service_s: float) -> float:
    """P(wait <= t) in an M/D/1 queue (Erlang 1909): (1 - rho) sum_{k <= t/D} (rate (kD - t))^k / k! e^(-rate (kD - t))."""
    getcontext().prec = 40
    lam, d, t_ = Decimal(repr(rate)), Decimal(repr(service_s)), Decimal(repr(t))
    total, k, factorial = Decimal(0), 0, Decimal(1)
    while k * d <= t_:
        x = lam * (k * d - t_)
        total += (x**k if k else Decimal(1)) / factorial * (-x).exp()
        k += 1
        factorial *= k
    return float((1 - lam * d) * total)


def md1_limit(wait_s: float, service_s: float, q: float) -> float:
    """The rate at which the ``q``-quantile of the wait reaches ``wait_s``."""
    lo, hi = 1e-9, (1 - 1e-9) / service_s
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_waiting_cdf(wait_s, mid, service_s) >= q else (lo, mid)
    return lo


@dataclass
class MD1:
    service_s: float
    first_s: float
    free_at: float = 0.0

    def arrive(self, sends: list[tuple[float, Send]]) -> list[tuple[Send, float, float, float]]:
        """``(send, sent_at, first_token_at, end_at)`` for sends arriving together, first come first served."""
        out = []
        for at, send in sends:
            start = max(at, self.free_at)
            self.free_at = start + self.service_s
            out.append((send, at, start + self.first_s, self.free_at))
        return out


@dataclass
class Lockstep:
    overhead_s: float
    per_user_s: float
    steps: int
    jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(f"lockstep:{self.seed}")

    def base_s(self, users: int) -> float:
        return self.overhead_s + self.per_user_s * users

    def percentile_s(self, users: int, q: float) -> float:
        """The ``q``-quantile of TPOT at ``users`` (over rounds, so over requests)."""
        return self.base_s(users) * (1 + self.jitter * NormalDist().inv_cdf(q) / math.sqrt(self.steps))

    def limit(self, threshold_s: float, q: float, *, most: int = 4096) -> int:
        """The highest concurrency whose TPOT ``q``-quantile is within ``threshold_s`` (0: none)."""
        return max((c for c in range(1, most + 1) if self.percentile_s(c, q) <= threshold_s), default=0)

    def arrive(self, sends: list[tuple[float, Send]]) -> list[tuple[Send, float, float, float]]:
        """One round for the users arriving together."""
        at = sends[0][0]
        base = self.base_s(len(sends))
        step = [base * (1 + self.jitter * self.rng.gauss(0.0, 1.0)) for _ in range(self.steps)]
        first = at + self.overhead_s
        end = first + sum(step)
        return [(send, at, first, end) for _, send in sends]


class Plateau(Lockstep):
    """A lockstep server whose TPOT rises with users up to 8, stays the same up to 24, then rises again: with its
    p99 at 16 users as the threshold, the percentile sits exactly on it from 8 to 24 users (the limit: 24), and
    lies 3.6 % above it at 25."""

    def base_s(self, users: int) -> float:
        return self.overhead_s + 0.0005 * min(users, 8) + 0.0005 * max(0, users - 24)


@dataclass(slots=True)
class Ended:
    """A request that ended: what the program is told (its :class:`~cardgen.outcome.Outcome`), and its send."""

    send: Send
    outcome: Outcome

    def record(self, point: Point, index: int) -> RequestRecord:
        """The request's record, as an interpreter writes it."""
        send, o = self.send, self.outcome
        return RequestRecord(**record_fields(point, send, worker="oracle", index=index, attempt=0),
                             sent_at=o.sent_at, scheduled_at=send.at if send.scheduled else None,
                             first_token_at=o.first_token_at, end_at=o.end_at, chunk_times=list(o.chunk_times),
                             output_tokens=o.output_tokens, prompt_tokens=send.prompt_tokens, status=200)


def run_search(point: Point, server: MD1 | Lockstep, *, copies: bool = False) -> tuple[SloProgram, list[Ended]]:
    """The SLO search of ``point`` against ``server``, in virtual time: the program and what ended, in order.
    ``copies``: tell the program of each ended request with a copy of its send (an equal, not the same, object),
    as an interpreter that sends its commands across processes would."""
    program = SloProgram(point)
    events: list[tuple[float, int, int, object]] = []  # (time, 0 end | 1 arrive, order, what): ends first
    order = itertools.count()
    records: list[Ended] = []

    def take(commands: list, now: float) -> None:
        for c in commands:
            if isinstance(c, Send):
                heapq.heappush(events, (now if c.at is None else max(c.at, now), 1, next(order), c))

    take(program.start(), 0.0)
    while events:
        now = events[0][0]
        arriving = []
        while events and events[0][0] == now and events[0][1] == 1:
            arriving.append((now, heapq.heappop(events)[3]))
        if arriving:
            for send, sent, first, end in server.arrive(arriving):
                heapq.heappush(events, (end, 0, next(order), (send, sent, first, end)))
            continue
        _, _, _, (send, sent, first, end) = heapq.heappop(events)
        outcome = Outcome(ok=True, sent_at=sent, first_token_at=first, end_at=end, prompt_tokens=send.prompt_tokens,
                          output_tokens=send.output_tokens, chunk_times=(first, end))  # no ITL targets here
        records.append(Ended(send, outcome))
        take(program.ended(dataclasses.replace(send) if copies else send, outcome, end), end)
    return program, records
