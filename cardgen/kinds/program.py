"""The language between a scenario program and the interpreter that runs it.

A scenario kind is written once, as a program that never reads a clock and never touches a socket (the
sans-I/O idea of h11; a process of SimPy's). It says what to send and when, and it is told what happened:

    interpreter calls                      program answers
    start()                                commands, at the point's start
    ended(send, outcome, now)              commands, when a request it sent has ended (failed or not):
                                           its Outcome (cardgen.outcome), not the stored record
    watched(verdict, now)                  commands, after an EndWatch: whether the server saturated
    told_precise()                         nothing: every process's records say the point's figures are known

    commands   Send       one request: its lengths, its user (``slot``), when it leaves (``at``), its record fields
               Watch      watch the server for saturation from now
               EndWatch   stop watching, then tell me (``watched``)

Times are seconds from the point's start on the interpreter's clock, whichever it is. The program's ``stop``
and ``detail`` say why it stopped sending, in ``run.json``'s words (``cardgen.stops``). A process
has finished its share of a point once the program asks for nothing more and no request is under way.

Two interpreters run every program: the load engine (:mod:`cardgen.load.agent`: gevent inside Locust, real
sockets, one program per load-generating process) and the virtual-time driver (:mod:`cardgen.sim.drive`: the
virtual server on a virtual clock). What needs every process's records, a closed loop's precision, is a
:class:`Judge`'s, which sits where the records meet (:mod:`cardgen.scenarios.controller`).
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome, RequestFigures
from cardgen.stops import STOP_COMPLETE


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One request of the point. ``slot`` is the user whose connection carries it (None: any free one); ``at``
    when it leaves, in seconds from the point's start (None: at once). The rest are what its record says of it
    (:class:`~cardgen.schemas.records.RequestRecord`); ``scheduled`` records ``at`` as ``scheduled_at``."""

    prompt_tokens: int
    output_tokens: int
    slot: int | None = None
    at: float | None = None
    scheduled: bool = False
    parallel: int | None = None
    rate_rps: float | None = None
    repeat: int | None = None
    warmup: bool = False
    item: int | None = None  # the request's number in the point's sample (dataset, shared prefix)
    prefix: int | None = None
    phase: str | None = None
    conversation: int | None = None
    turn: int | None = None
    adapter: str | None = None  # the LoRA adapter it asks for (the model name it sends); None: the base model
    # whether its output is forced to ``output_tokens`` (the run's length fields); False: ``output_tokens`` is only
    # its most, its own end is its length (an answer constrained to a grammar ends where the grammar does)
    length_forced: bool = True
    # the kind's own description of this request, read by its shape (cardgen.kinds.shape) and recorded as the
    # record's ``extra``; None: a plain request
    extra: Mapping[str, Any] | None = None
    # the program's own number for this send, told back with its outcome (the interpreter hands back the Send it
    # was given, but a program keys on this, not on the object's identity); not recorded
    tag: int | None = None


@dataclass(frozen=True, slots=True)
class Watch:
    """Watch the server for saturation from now on."""


@dataclass(frozen=True, slots=True)
class EndWatch:
    """Stop watching; the interpreter then calls ``watched`` with the :class:`Verdict`."""


Command = Send | Watch | EndWatch


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the server showed while it was watched: whether it saturated (``cardgen.saturation.watched_saturated``
    at some reading), and whether it could be read at all (its ``/metrics`` answered)."""

    saturated: bool
    readable: bool = True


@dataclass(frozen=True, kw_only=True)
class Said:
    """What one process's program says once it stopped sending its share of a point: why, the words behind it,
    and what it found: a program that sends requests in groups at once, the size of each group in order
    (``sizes``), and what it saw saturate the server, in words (``saturated``; None: nothing did)."""

    stop: str | None
    detail: str | None = None
    sizes: tuple[int, ...] = ()
    saturated: str | None = None


def record_fields(point: PointView, send: Send, *, worker: str, index: int, attempt: int,
                  scheduled_at: float | None = None) -> dict[str, Any]:
    """The fields of a :class:`~cardgen.schemas.records.RequestRecord` that the point and the send fix: where
    the request belongs and what it asked for, and when it was to leave (``scheduled_at``, Unix seconds on the
    interpreter's clock, for a send whose time is ``scheduled``). Every interpreter builds its records from these,
    adding only what happened (times, usage, errors)."""
    fields: dict[str, Any] = {"scheduled_at": scheduled_at} if send.scheduled and scheduled_at is not None else {}
    return {**fields,
        "scenario": point.name, "kind": point.kind, "group": point.group, "endpoint": point.endpoint,
        "prompt_tokens_target": send.prompt_tokens, "output_tokens_target": send.output_tokens,
        "worker": worker, "index": index, "attempt": attempt, "parallel": send.parallel,
        "rate_rps": send.rate_rps, "repeat": send.repeat, "warmup": send.warmup,
        "item": send.item, "prefix": send.prefix, "phase": send.phase, "conversation": send.conversation,
        "turn": send.turn, "adapter": send.adapter, "extra": dict(send.extra) if send.extra is not None else None,
        "length_forced": None if send.length_forced else False,
    }


class Program:
    """One scenario kind's rules for one point, as one load-generating process runs its share of it (process
    ``index`` of ``parts``; the virtual-time driver is one process). Subclasses answer the events they need."""

    kind: ClassVar[str]
    #: a barrier kind's timing is all of it at once (a group sent at once, one prompt at a time): it runs whole, on
    #: process 0, never split across processes
    barrier: ClassVar[bool] = True

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        self.point, self.index, self.parts = point, index, parts
        self.issued = 0  # the requests this program has asked for
        self.stop: str | None = None  # why it stopped sending (STOP_*), once it has
        self.detail: str | None = None  # the words behind ``stop``
        self._rng: random.Random | None = None  # the random adapter pick's

    @classmethod
    def runs_on(cls, index: int) -> bool:
        """Whether load-generating process ``index`` takes part in a point of this kind."""
        return index == 0 or not cls.barrier

    def start(self) -> list[Command]:
        raise NotImplementedError

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        return []

    def watched(self, verdict: Verdict, now: float) -> list[Command]:
        return []

    def told_precise(self) -> None:
        """The point's figures are known (its :class:`Judge` said so, on every process's records)."""

    def said(self) -> Said:
        """Why it stopped sending (``stop`` once it has, None before), in words, and what it found."""
        return Said(stop=self.stop, detail=self.detail)

    def send(self, *, prompt_tokens: int | None = None, output_tokens: int | None = None, **fields: Any) -> Send:
        """A :class:`Send` of the point's own lengths unless told otherwise, with the adapter it picks; counted in
        ``issued``."""
        point = self.point
        if point.adapters and "adapter" not in fields:
            fields["adapter"] = self.adapter(fields.get("slot"))
        self.issued += 1
        return Send(prompt_tokens=point.prompt_tokens if prompt_tokens is None else prompt_tokens,
                    output_tokens=point.output_tokens if output_tokens is None else output_tokens, **fields)

    def adapter(self, slot: int | None) -> str:
        """The LoRA adapter the next request asks for, by the point's rule (``Point.adapter_pick``): in turn over
        the point's requests (every process's, interleaved), at random (seeded by the point and the process), or
        one per user (``slot``; in turn for a request of no user)."""
        adapters, pick = self.point.adapters, self.point.adapter_pick
        if pick == "per-user" and slot is not None:
            return adapters[slot % len(adapters)]
        if pick == "random":
            if self._rng is None:
                self._rng = random.Random(f"adapters:{self.point.name}:{self.index}")
            return adapters[self._rng.randrange(len(adapters))]
        return adapters[(self.issued * self.parts + self.index) % len(adapters)]

    def item(self, number: int, **fields: Any) -> Send:
        """A :class:`Send` of request ``number`` of the point's own sample (a dataset's, a shared prefix's)."""
        prompt, output = self.point.item_lengths(number)
        return self.send(prompt_tokens=prompt, output_tokens=output, item=number, **fields)

    def finish(self, stop: str = STOP_COMPLETE, detail: str | None = None) -> list[Command]:
        """Stop sending, for ``stop`` (once: the first reason stays)."""
        if self.stop is None:
            self.stop, self.detail = stop, detail
        return []


class Judge:
    """A point's records from every process, where they meet (the controller's side of a point): how many, when
    its first round ended, the speeds the saturation rule reads. A kind whose figures are judged across
    processes (the closed loop's precision) says, in :meth:`record`, when every process should stop sending."""

    def __init__(self, point: PointView) -> None:
        self.point = point
        self.parallel = point.parallel or 1
        self.requests = 0
        self.first_round_end: float | None = None
        # the speed from start of each successful record that has one, in the order they ended: all the saturation
        # rule reads of them, in a compact column (8 bytes a request), so a long point holds no record
        self.speeds = array("d")

    def record(self, rec: Outcome, now: float) -> bool:
        """Take one of the point's records (``now``: seconds since the point started, as its end was seen);
        True once every process should stop sending."""
        self.requests += 1
        if self.requests == self.parallel:
            self.first_round_end = rec.end_at
        if rec.ok and not math.isnan(speed := RequestFigures.of(rec).speed_from_start_tok_s):
            self.speeds.append(speed)
        return False

    def detail(self, stop: str, said: str | None) -> str | None:
        """The words behind the point's ``stop``, given what its processes ``said``."""
        return said

    def median_speed_tok_s(self) -> float | None:
        """The median speed from start of every successful record that has one (the saturation rule's
        speed)."""
        return float(np.median(np.frombuffer(self.speeds, dtype=float))) if self.speeds else None


def share(total: int, index: int, parts: int) -> int:
    """Process ``index``'s share of ``total`` items split as evenly as possible over ``parts`` processes."""
    return total // parts + (1 if index < total % parts else 0)


def interval_words(figure: str, interval: Any, target: float, over: str) -> str:
    """A figure's interval as a stop's detail says it: ``the slope +-1.2% after 3 sweeps (target +-2%)``."""
    if interval is None:
        return f"{figure}: no interval yet after {over} (target +-{target * 100:g}%)"
    return f"{figure} +-{interval.relative:.1%} after {over} (target +-{target * 100:g}%)"


def counted(n: int, noun: str) -> str:
    """``1 sweep``, ``3 sweeps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
