"""The SLO search: the highest load whose percentiles meet the point's SLO with 95 % confidence
(:mod:`cardgen.slo`), found by probing loads one after another within one point.

``load: rate`` probes open-loop rates (Poisson arrivals, requests/s); ``load: parallel`` closed-loop
concurrencies. :class:`LoadSearch` picks the loads: double from ``start_load`` until a probe misses (or the
probe at ``max_load`` meets), halve while the first probes miss (down to ``min_load``), then bisect until the
lowest load shown to miss is within ``slo_resolution`` of the highest shown to meet (for parallel counts, or
one apart). A probe that cannot tell after ``max_requests`` requests lies too close to the limit to say on which
side: the search goes on around it (:class:`LoadSearch`), and the words name it.

A probe stops sending once its verdict is decided (:class:`cardgen.slo.ProbeJudge`: at least ``min_requests``),
and the next one starts when its last request has ended. A closed-loop probe's first round is its warm-up (all
its users start at once), left out of the verdict. An open-loop probe cannot know in advance how many requests
it will need and no request can be taken back once asked for, so its Poisson arrivals are asked for a little
ahead of time: up to :func:`lookahead_s` ahead of the last request's end. Should no request end for that long
(the schedule runs dry), the arrivals already due leave at once, marked ``phase: late``: the load was not held,
so that probe cannot be said to meet the SLO.

The search runs whole on one load-generating process (a barrier kind): each probe is judged on every one of
its requests as they end. Every request records its probe's number (``repeat``) and load (``rate_rps`` or
``parallel``), so the analysis judges each probe again on the same evidence (:mod:`cardgen.analysis.slosearch`).
"""

from __future__ import annotations

import math
import random

from cardgen.points import Point
from cardgen.scenarios.program import Command, Program, Send
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import STOP_COMPLETE, STOP_MAX_REQUESTS, STOP_PRECISION
from cardgen.slo import ProbeJudge, Target, Verdict, targets_text

LOOKAHEAD_S = 5.0  # an open-loop probe's arrivals are asked for at least this far ahead ...
LOOKAHEAD_REQUESTS = 20  # ... and at least this many arrivals ahead ...
LOOKAHEAD_E2E = 4.0  # ... and at least this many times the longest request seen so far
MAX_UNDECIDED = 3  # the search stops once this many probes could not tell
LATE = "late"  # the phase of an arrival that left after its time: the schedule ran dry


def lookahead_s(rate: float, longest_e2e_s: float) -> float:
    """How far ahead an open-loop probe at ``rate`` asks for its arrivals."""
    return max(LOOKAHEAD_S, LOOKAHEAD_REQUESTS / rate, LOOKAHEAD_E2E * longest_e2e_s)


def unit(load: str) -> str:
    """``req/s`` or ``parallel``."""
    return "req/s" if load == "rate" else "parallel"


class LoadSearch:
    """The loads to probe (module docstring). ``next_load()`` gives the next (None when done); ``report(load,
    met)`` says how it went (``met`` None: the probe could not tell).

    A load that could not be told lies too close to the limit for ``max_requests`` requests to say on which side;
    the search goes on around it, into the widest gap left between the loads it knows (the highest shown to meet,
    those it could not tell, the lowest shown to miss), until every gap is within the resolution or
    :data:`MAX_UNDECIDED` probes could not tell."""

    def __init__(self, *, start: float, lowest: float, highest: float, resolution: float, whole: bool) -> None:
        self.start, self.lowest, self.highest = start, lowest, highest
        self.resolution, self.whole = resolution, whole
        self.low: float | None = None  # the highest load shown to meet
        self.high: float | None = None  # the lowest load shown to miss
        self.undecided: list[float] = []  # loads that could not be told
        self.loads: list[float] = []
        self._pending: float | None = None

    def next_load(self) -> float | None:
        if self._pending is not None:
            raise RuntimeError("report the last probe before asking for the next")
        load = self._choose()
        if load is not None:
            self._pending = float(load)
        return self._pending

    def _choose(self) -> float | None:
        if not self.loads:
            return self.start
        if len(self.undecided) >= MAX_UNDECIDED:
            return None
        if self.high is None:  # nothing missed yet: grow past every load tried
            top = max(self.loads)
            return None if top >= self.highest else min(top * 2, self.highest)
        if self.low is None:  # nothing met yet: shrink below every load tried
            bottom = min(self.loads)
            if bottom <= self.lowest:
                return None
            return max(math.floor(bottom / 2) if self.whole else bottom / 2, self.lowest)
        gap = self.widest_gap()
        if gap is None:
            return None
        a, b = gap
        return (a + b) // 2 if self.whole else (a + b) / 2

    def widest_gap(self) -> tuple[float, float] | None:
        """The widest gap between known loads from ``low`` to ``high`` still wider than the resolution (for
        parallel counts, with a count inside it); None when there is none."""
        if self.low is None or self.high is None:
            return None
        known = sorted({self.low, self.high, *(u for u in self.undecided if self.low < u < self.high)})
        gaps = [(a, b) for a, b in zip(known, known[1:], strict=False) if self._wide(a, b)]
        return max(gaps, key=lambda g: (g[1] - g[0]) / g[0], default=None)

    def _wide(self, a: float, b: float) -> bool:
        return b - a > max(1 if self.whole else 0, self.resolution * a)

    def report(self, load: float, met: bool | None) -> None:
        if load != self._pending:
            raise RuntimeError(f"a probe at {load:g} reported, {self._pending} was asked for")
        self._pending = None
        self.record(load, met)

    def record(self, load: float, met: bool | None) -> None:
        """A probe's verdict, asked for or not (the analysis retells a search from its records)."""
        self.loads.append(load)
        if met is None:
            self.undecided.append(load)
        elif met:
            self.low = load if self.low is None else max(self.low, load)
        else:
            self.high = load if self.high is None else min(self.high, load)

    @property
    def bracketed(self) -> bool:
        """Whether the highest load within the SLO is known to within the resolution."""
        return self.low is not None and self.high is not None and not self._wide(self.low, self.high)

    @property
    def untold(self) -> list[float]:
        """The loads that could not be told between ``low`` and ``high`` (or beyond the one that is known)."""
        return sorted(u for u in self.undecided if (self.low is None or u > self.low)
                      and (self.high is None or u < self.high))


def answer_words(search: LoadSearch, load: str, targets: tuple[Target, ...]) -> str:
    """The search's answer in words (the point's stop detail)."""
    u, low, high = unit(load), search.low, search.high
    slo = targets_text(targets)
    if low is not None and high is not None:
        said = f"highest {'rate' if load == 'rate' else 'concurrency'} within SLO ({slo}) between {low:g} and {high:g} {u}"
    elif low is not None:
        said = f"every load up to {low:g} {u} met the SLO ({slo}): the limit is higher"
    elif high is not None:
        said = f"no load down to {high:g} {u} met the SLO ({slo})"
    else:
        said = f"no probe could tell whether the SLO ({slo}) was met"
    untold = search.untold
    if untold:
        said += f"; at {', '.join(f'{x:g}' for x in untold)} {u} the probe could not tell"
    return f"{said} ({len(search.loads)} probe{'s' if len(search.loads) != 1 else ''})"


class _Probe:
    """One load's requests and their judge."""

    def __init__(self, program: SloProgram, number: int, load: float) -> None:
        self.program, self.number, self.load = program, number, load
        point = program.point
        self.judge = ProbeJudge(program.targets, min_requests=point.min_requests, max_requests=point.max_requests)
        self.order: dict[int, int] = {}  # id of a send under way -> its position among the probe's sends
        self.sends = 0
        self.in_flight = 0
        self.stopped = False  # sends no more
        self.verdict: Verdict | None = None  # once every request ended

    def new_send(self, **fields: object) -> Send:
        program = self.program
        if program.point.dataset is not None:
            send = program.item(program.drawn % len(program.point.items), repeat=self.number, **fields)
        else:
            send = program.send(repeat=self.number, **fields)
        program.drawn += 1
        self.order[id(send)] = self.sends
        self.sends += 1
        self.in_flight += 1
        if self.sends >= self.program.point.max_requests:
            self.stopped = True
        return send

    def start(self, now: float) -> list[Command]:
        raise NotImplementedError

    def more(self, send: Send, now: float) -> list[Command]:
        """What to send after ``send`` ended at ``now``, while the probe goes on."""
        raise NotImplementedError

    def ended(self, send: Send, record: RequestRecord, now: float) -> list[Command]:
        order = self.order.pop(id(send))
        self.in_flight -= 1
        if self.judge.add(order, record, warmup=send.warmup, late=send.phase == LATE) is not None:
            self.stopped = True
        commands = [] if self.stopped else self.more(send, now)
        if self.stopped and self.in_flight == 0:
            self.verdict = self.judge.finish()
        return commands


class _OpenProbe(_Probe):
    """Poisson arrivals at ``load`` requests/s, seeded by the point's seed and the probe's number."""

    def __init__(self, program: SloProgram, number: int, load: float, t0: float) -> None:
        super().__init__(program, number, load)
        self.rng = random.Random(f"slo:{program.point.seed}:{number}")
        self.next_at = t0 + self.rng.expovariate(load)

    def start(self, now: float) -> list[Command]:
        first = self._schedule(now)
        if first:
            return first
        at, self.next_at = self.next_at, self.next_at + self.rng.expovariate(self.load)
        return [self.new_send(at=at, scheduled=True, rate_rps=self.load)]

    def more(self, send: Send, now: float) -> list[Command]:
        return self._schedule(now)

    def _schedule(self, now: float) -> list[Command]:
        horizon = now + lookahead_s(self.load, self.program.longest_e2e_s)
        out: list[Command] = []
        while not self.stopped and self.next_at <= horizon:
            late = self.next_at < now
            out.append(self.new_send(at=now if late else self.next_at, scheduled=True, rate_rps=self.load,
                                     phase=LATE if late else None))
            self.next_at += self.rng.expovariate(self.load)
        return out


class _ClosedProbe(_Probe):
    """``load`` users, each sending its next request when its last one ends; the first round is the warm-up."""

    def start(self, now: float) -> list[Command]:
        users = int(self.load)
        return [self.new_send(slot=slot, parallel=users, warmup=True) for slot in range(users)
                if not self.stopped]

    def more(self, send: Send, now: float) -> list[Command]:
        return [self.new_send(slot=send.slot, parallel=int(self.load))]


class SloProgram(Program):
    kind = "slo"

    def __init__(self, point: Point, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.targets = tuple(Target(m, p, t) for m, p, t in point.slo)
        self.search = LoadSearch(start=point.start_load, lowest=point.min_load, highest=point.max_load,
                                 resolution=point.slo_resolution, whole=point.load == "parallel")
        self.probes: list[_Probe] = []
        self.longest_e2e_s = 0.0
        self.drawn = 0  # requests drawn from the point's dataset sample, in order

    def start(self) -> list[Command]:
        return self._next_probe(0.0)

    def ended(self, send: Send, record: RequestRecord, now: float) -> list[Command]:
        if record.end_at is not None:
            self.longest_e2e_s = max(self.longest_e2e_s, record.end_at - record.sent_at)
        probe = self.probes[-1]
        commands = probe.ended(send, record, now)
        if probe.verdict is None:
            return commands
        self.search.report(probe.load, probe.verdict.met)
        return commands + self._next_probe(now)

    def _next_probe(self, now: float) -> list[Command]:
        load = self.search.next_load()
        if load is None:
            return self._done()
        number = len(self.probes)
        probe: _Probe = (_OpenProbe(self, number, load, now) if self.point.load == "rate"
                         else _ClosedProbe(self, number, load))
        self.probes.append(probe)
        return probe.start(now)

    def _done(self) -> list[Command]:
        search = self.search
        stop = (STOP_PRECISION if search.bracketed else STOP_MAX_REQUESTS if search.untold else STOP_COMPLETE)
        return self.finish(stop, answer_words(search, self.point.load, self.targets))
