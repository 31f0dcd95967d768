"""One shared runner between a scenario program and the interpreter that runs it (the load engine's agent, the
virtual-time driver): the dispatch of the program's commands, the requests under way, the saturation watch's state
and what the process says once it stops. An interpreter supplies only what differs between clocks, as a SimPy
environment does: sending a request at its time, reading the server while it is watched, and its clock (:class:`IO`).

    share = Share(point, io, index=0, parts=1)
    share.dispatch(share.start())        # the program's first commands
    ...                                  # io.send(send) was called; the request ran; then:
    follow = share.ended(send, record)   # its outcome to the program, the next commands dispatched
    share.said()                         # once share.idle: why the process stopped (complete when it took no part)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cardgen.kinds import program_for, runs_on
from cardgen.kinds.program import Command, EndWatch, Program, Said, Send, Verdict, Watch
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.saturation import watched_saturated
from cardgen.schemas.records import RequestRecord
from cardgen.stops import STOP_COMPLETE


class IO(Protocol):
    """What an interpreter does for a :class:`Share`."""

    def send(self, send: Send) -> None:
        """Send ``send`` at its time (``send.at`` seconds from the point's start; None: now), then call
        :meth:`Share.ended` with its record (or :meth:`Share.dropped` when it never left)."""
        ...

    def watch(self) -> None:
        """Start reading the server for saturation (each reading to :meth:`Share.reading`)."""
        ...

    def end_watch(self) -> Verdict:
        """Stop reading it; what it showed (:attr:`Share.watch`'s verdict, and whether it could be read)."""
        ...

    def now(self) -> float:
        """Seconds since the point's start, on the interpreter's clock."""
        ...


@dataclass
class WatchState:
    """A point's saturation watch (``Watch`` .. ``EndWatch``), as the readings of either clock feed it: saturated once one reading shows it
    (:func:`cardgen.saturation.watched_saturated`), or the preemption counter rose since the watch began."""

    slot_bound: bool = False  # a server with a fixed number of slots and no KV gauge (llama.cpp)
    preempted_at_start: float | None = None
    saturated: bool = False
    readable: bool = True

    def begin(self, preemptions: float | None) -> None:
        self.preempted_at_start, self.saturated = preemptions, False

    def reading(self, *, preemptions: float | None, waiting: float | None, usage: float | None,
                queued_for_kv: bool = False) -> None:
        """One reading of the server while it is watched."""
        preempted = (preemptions is not None and self.preempted_at_start is not None
                     and preemptions > self.preempted_at_start)
        if watched_saturated(preempted=preempted, waiting=waiting, kv_usage=usage, queued_for_kv=queued_for_kv,
                             slot_bound=self.slot_bound):
            self.saturated = True

    def verdict(self) -> Verdict:
        return Verdict(saturated=self.saturated, readable=self.readable)


class Share:
    """One process's share of a point (process ``index`` of ``parts``): its program, when the process takes part
    (a barrier kind runs whole on process 0), and the requests under way."""

    def __init__(self, point: Point, io: IO, *, index: int = 0, parts: int = 1) -> None:
        self.point, self.io = point, io
        self.program: Program | None = program_for(point, index=index, parts=parts) if runs_on(point, index) \
            else None
        self.in_flight = 0
        self.watch = WatchState()

    @property
    def idle(self) -> bool:
        """The program asks for nothing more until a request ends, and none is under way."""
        return self.in_flight == 0

    def start(self) -> Sequence[Command]:
        """The program's first commands, for :meth:`dispatch` once the interpreter has set its clock's start (a
        point that starts with timed requests may start a little later, so that the first is ready)."""
        return self.program.start() if self.program is not None else []

    def dispatch(self, commands: Sequence[Command]) -> None:
        """Carry out the program's commands in order: a watch starts (or ends) before the sends after it."""
        for command in commands:
            if isinstance(command, Send):
                self.in_flight += 1
                self.io.send(command)
            elif isinstance(command, Watch):
                self.io.watch()
            elif isinstance(command, EndWatch) and self.program is not None:
                self.dispatch(self.program.watched(self.io.end_watch(), self.io.now()))

    def ended(self, send: Send, record: RequestRecord, *, keep_slot: bool = False,
              outcome: Outcome | None = None) -> Send | None:
        """``send`` ended with ``record``: its outcome (``outcome``, where the caller made it already) to the
        program, whose commands are dispatched. With ``keep_slot``, the program's next request of the same user
        (``slot``) comes back instead, to be sent on that user's connection at once (it counts as under way)."""
        assert self.program is not None
        self.in_flight -= 1
        commands = self.program.ended(send, Outcome.of(record) if outcome is None else outcome, self.io.now())
        follow = None
        if keep_slot and send.slot is not None:
            follow = next((c for c in commands if isinstance(c, Send) and c.at is None and c.slot == send.slot), None)
        if follow is not None:
            self.in_flight += 1
        self.dispatch([c for c in commands if c is not follow])
        return follow

    def dropped(self, send: Send) -> None:
        """``send`` never left (the interpreter stopped first): it is no longer under way."""
        self.in_flight -= 1

    def told_precise(self) -> None:
        if self.program is not None:
            self.program.told_precise()

    def said(self) -> Said:
        """Why the process stopped sending: its program's words, or complete when it took no part."""
        return self.program.said() if self.program is not None else Said(stop=STOP_COMPLETE)
