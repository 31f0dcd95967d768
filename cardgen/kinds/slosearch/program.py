"""The SLO search: the highest load whose percentiles meet the point's SLO with 95 % confidence
(:mod:`cardgen.slo`), found by probing loads one after another within one point.

``load: rate`` probes open-loop rates (Poisson arrivals, requests/s); ``load: parallel`` closed-loop
concurrencies. :class:`cardgen.kinds.slosearch.loadsearch.LoadSearch` picks each probe's load and how many requests it
may send (its cap), within the point's ``max_requests`` for the whole search: it brackets the limit, then spends
what is left on the loads that decide the bracket's ends.

A probe stops sending once its verdict is decided, or once even its cap would not decide it
(:class:`cardgen.slo.ProbeJudge`: at least ``min_requests``), and the next one starts when its last request has
ended. A closed-loop probe's first round is its warm-up (all its users start at once), left out of the verdict.
An open-loop probe cannot know in advance how many requests it will need and no request can be taken back once
asked for, so its Poisson arrivals are asked for a little ahead of time: up to :func:`lookahead_s` ahead of the
last request's end. Should no request end for that long (the schedule runs dry), the arrivals already due leave
at once, marked ``phase: late``: the load was not held, so that probe cannot be said to meet the SLO.

The search runs whole on one load-generating process (a barrier kind): each probe is judged on every one of
its requests as they end. Every request records its probe's number (``repeat``) and load (``rate_rps`` or
``parallel``), so the analysis judges each probe again on the same evidence, with the cap the search gave it
(:mod:`cardgen.kinds.slosearch.analysis`).
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist
from typing import Any

from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.slosearch.loadsearch import FLAT, LoadSearch, Probed
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome, RequestFigures
from cardgen.quantiles import tail_ready
from cardgen.slo import ProbeJudge, Target, Verdict, targets_text
from cardgen.stops import STOP_COMPLETE, STOP_MAX_REQUESTS, STOP_PRECISION

LOOKAHEAD_S = 5.0  # an open-loop probe's arrivals are asked for at least this far ahead ...
LOOKAHEAD_REQUESTS = 20  # ... and at least this many arrivals ahead ...
LOOKAHEAD_E2E = 4.0  # ... and at least this many times the longest request seen so far
LATE = "late"  # the phase of an arrival that left after its time: the schedule ran dry


def lookahead_s(rate: float, longest_e2e_s: float) -> float:
    """How far ahead an open-loop probe at ``rate`` asks for its arrivals."""
    return max(LOOKAHEAD_S, LOOKAHEAD_REQUESTS / rate, LOOKAHEAD_E2E * longest_e2e_s)


def unit(load: str) -> str:
    """``req/s`` or ``parallel``."""
    return "req/s" if load == "rate" else "parallel"


def new_search(params: SloParams) -> LoadSearch:
    """A search point's search (``params``: its own), before any probe."""
    return LoadSearch(start=params.start_load, lowest=params.min_load, highest=params.max_load,
                      resolution=params.resolution, whole=params.load == "parallel",
                      budget=params.max_requests, min_requests=params.min_requests)


def _z(level: float) -> float:
    return NormalDist().inv_cdf(min(max(level, 0.5 + 1e-9), 1 - 1e-12)) or 1.0


def probed(load: float, verdict: Verdict, *, requests: int, cap: int) -> Probed:
    """What the search learns from a probe's verdict: the binding target's percentile over its threshold, and
    that target's standard errors per value (the tail bound's; a bound's distance over its normal quantile)."""
    binding = max((e for e in verdict.estimates if e.value_s is not None),
                  key=lambda e: (e.value_s or 0.0) / e.target.threshold_s, default=None)  # value_s: never None here
    spread_met = spread_miss = None
    if (binding is not None and binding.value_s is not None and math.isfinite(binding.value_s)
            and binding.effective_n is not None  # and enough values for an error to be trusted
            and tail_ready(binding.target.percentile / 100, binding.n, binding.effective_n)):
        per = math.sqrt(binding.n) / binding.target.threshold_s
        if binding.se_s is not None and math.isfinite(binding.se_s):
            spread_met = binding.se_s * per
        elif binding.upper_s is not None and math.isfinite(binding.upper_s):
            spread_met = (binding.upper_s - binding.value_s) / _z(binding.level) * per
        if binding.lower_s is not None and math.isfinite(binding.lower_s) and binding.lower_level is not None:
            spread_miss = (binding.value_s - binding.lower_s) / _z(binding.lower_level) * per
    weight = binding.effective_n if binding is not None and binding.effective_n else 1.0
    return Probed(load=load, met=verdict.met, requests=requests, cap=cap, ratio=verdict.ratio,
                  spread_met=spread_met, spread_miss=spread_miss, weight=weight)


def answer_words(search: LoadSearch, load: str, targets: tuple[Target, ...]) -> str:
    """The search's answer in words (the point's stop detail): the bracket, and the loads it could not tell or the
    range where the boundary is flat (the crossing and the requests are the summary's, which differ between
    clocks where the bracket does not)."""
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
    flat = search.flat()
    if flat is not None:
        said += (f"; the boundary is flat: from {flat[0]:g} to {flat[1]:g} {u} the percentile stays within "
                 f"{FLAT * 100:g} % of its threshold")
    else:
        untold = search.untold
        if untold:
            said += f"; at {', '.join(f'{x:g}' for x in untold)} {u} the probe could not tell"
    if search.out_of_budget:
        said += f"; its budget of {search.budget} requests ran out before a probe could narrow it"
    n = len(search.probes)
    return f"{said} ({n} probe{'s' if n != 1 else ''})"


class _Probe:
    """One load's requests and their judge."""

    def __init__(self, program: SloProgram, number: int, load: float, cap: int) -> None:
        self.program, self.number, self.load, self.cap = program, number, load, cap
        self.judge = ProbeJudge(program.targets, min_requests=program.params.min_requests, cap=cap)
        self.order: dict[int | None, int] = {}  # a send under way's tag -> its position among the probe's sends
        self.sends = 0
        self.in_flight = 0
        self.stopped = False  # sends no more
        self.verdict: Verdict | None = None  # once every request ended

    def new_send(self, **fields: Any) -> Send:
        program = self.program
        tag = program.drawn  # unique over the search: every probe draws from it
        if program.point.dataset is not None:
            send = program.item(program.drawn % len(program.point.items), repeat=self.number, tag=tag, **fields)
        else:
            send = program.send(repeat=self.number, tag=tag, **fields)
        program.drawn += 1
        self.order[tag] = self.sends
        self.sends += 1
        self.in_flight += 1
        if self.sends >= self.cap:
            self.stopped = True
        return send

    def start(self, now: float) -> list[Command]:
        raise NotImplementedError

    def more(self, send: Send, now: float) -> list[Command]:
        """What to send after ``send`` ended at ``now``, while the probe goes on."""
        raise NotImplementedError

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        order = self.order.pop(send.tag)
        self.in_flight -= 1
        if self.judge.add(order, outcome, warmup=send.warmup, late=send.phase == LATE) is not None:
            self.stopped = True
        commands = [] if self.stopped else self.more(send, now)
        if self.stopped and self.in_flight == 0:
            self.verdict = self.judge.finish()
        return commands


class _OpenProbe(_Probe):
    """Poisson arrivals at ``load`` requests/s, seeded by the point's seed and the probe's number."""

    def __init__(self, program: SloProgram, number: int, load: float, cap: int, t0: float) -> None:
        super().__init__(program, number, load, cap)
        self.rng = random.Random(f"slo:{program.params.seed}:{number}")
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

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(SloParams)
        self.targets = tuple(Target(m, p, t) for m, p, t in self.params.slo)
        self.search = new_search(self.params)
        self.probe: _Probe | None = None  # the probe under way (a finished one's records are let go)
        self.probed = 0  # the probes started
        self.longest_e2e_s = 0.0
        self.drawn = 0  # requests drawn from the point's dataset sample, in order

    def start(self) -> list[Command]:
        return self._next_probe(0.0)

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        took = RequestFigures.of(outcome).elapsed_s  # a failed request's time too: a timeout waits as long
        if not math.isnan(took):
            self.longest_e2e_s = max(self.longest_e2e_s, took)
        probe = self.probe
        assert probe is not None  # a request ended: a probe sent it
        commands = probe.ended(send, outcome, now)
        if probe.verdict is None:
            return commands
        self.search.report(probed(probe.load, probe.verdict, requests=probe.sends, cap=probe.cap))
        return commands + self._next_probe(now)

    def _next_probe(self, now: float) -> list[Command]:
        plan = self.search.next_probe()
        if plan is None:
            return self._done()
        number = self.probed
        probe: _Probe = (_OpenProbe(self, number, plan.load, plan.cap, now) if self.params.load == "rate"
                         else _ClosedProbe(self, number, plan.load, plan.cap))
        self.probe, self.probed = probe, self.probed + 1
        return probe.start(now)

    def _done(self) -> list[Command]:
        search = self.search
        stop = (STOP_PRECISION if search.bracketed
                else STOP_MAX_REQUESTS if search.untold or search.out_of_budget else STOP_COMPLETE)
        return self.finish(stop, answer_words(search, self.params.load, self.targets))
