"""Every scenario kind's program and judge, by the kind's name (``Point.kind``; the kinds themselves, and what
the rest of cardgen asks of them, are :mod:`cardgen.kinds`')."""

from __future__ import annotations

from cardgen.points import Point
from cardgen.scenarios.batch import BatchProgram
from cardgen.scenarios.chat import ChatProgram
from cardgen.scenarios.closed import ClosedJudge, ClosedProgram
from cardgen.scenarios.ingest import IngestProgram
from cardgen.scenarios.openloop import OpenProgram
from cardgen.scenarios.prefix import PrefixProgram
from cardgen.scenarios.program import Judge, Program
from cardgen.scenarios.slosearch import SloProgram
from cardgen.scenarios.waves import WavesProgram

PROGRAMS: dict[str, type[Program]] = {p.kind: p for p in (
    ClosedProgram, OpenProgram, WavesProgram, IngestProgram, BatchProgram, PrefixProgram, ChatProgram, SloProgram)}
JUDGES: dict[str, type[Judge]] = {ClosedProgram.kind: ClosedJudge}


def program_for(point: Point, *, index: int = 0, parts: int = 1) -> Program:
    """The program of ``point``'s kind for process ``index`` of ``parts``."""
    return PROGRAMS[point.kind](point, index=index, parts=parts)


def judge_for(point: Point) -> Judge:
    """The judge of ``point``'s records."""
    return JUDGES.get(point.kind, Judge)(point)


def runs_on(point: Point, index: int) -> bool:
    """Whether load-generating process ``index`` takes part in ``point`` (a barrier kind runs on process 0)."""
    return PROGRAMS[point.kind].runs_on(index)
