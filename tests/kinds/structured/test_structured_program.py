"""The structured kind's program: a warm-up pair, then rounds of ``parallel`` requests that alternate constrained
and free (ABBA), each waited for; a failing constrained warm-up stops the point; a tool set on completions is not
run."""

from __future__ import annotations

from dataclasses import replace

from programkit import record_of, sends_in

from cardgen.kinds.structured.program import StructuredProgram, round_plan
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.stops import STOP_COMPLETE, STOP_SKIPPED


def point(*, parallel: int = 2, rounds: int = 2, mode: str = "json", endpoint: str = "chat") -> Point:
    return Point(name="s", group="g", endpoint=endpoint, timeout_s=10.0, prompt_tokens=64, output_tokens=16,
                 parallel=parallel, params=replace(StructuredParams(), schema="flat", mode=mode, rounds=rounds))


def drive(program: StructuredProgram, *, fail=lambda send: False) -> list:
    """Run the program to its end, every request answered at once (or failing where ``fail`` says); every send."""
    sent, queue, t = [], sends_in(program.start()), 0.0
    while queue:
        batch, queue = queue, []
        for send in batch:
            sent.append(send)
            t += 1.0
            queue += sends_in(program.ended(send, Outcome.of(record_of(send, sent=t, ok=not fail(send))), t))
    return sent


def test_rounds_alternate_abba_after_a_warm_up_pair():
    assert round_plan(3) == ["constrained", "free", "free", "constrained", "constrained", "free"]
    program = StructuredProgram(point(parallel=2, rounds=2))
    sent = drive(program)
    assert [(s.phase, s.warmup, s.parallel) for s in sent[:2]] == [("constrained", True, 1), ("free", True, 1)]
    steady = sent[2:]
    assert [s.phase for s in steady] == ["constrained"] * 2 + ["free"] * 4 + ["constrained"] * 2
    assert [s.repeat for s in steady] == [0, 0, 1, 1, 2, 2, 3, 3] and {s.slot for s in steady} == {0, 1}
    assert all(s.extra == {"constrained": s.phase == "constrained"} for s in sent)
    assert all(s.length_forced == (s.phase == "free") for s in sent)  # a grammar ends a constrained answer
    assert {(s.prompt_tokens, s.output_tokens) for s in sent} == {(64, 16)}  # same lengths in both arms
    assert program.stop == STOP_COMPLETE and len(sent) == 2 + 2 * 2 * 2


def test_a_round_is_waited_for_before_the_next():
    program = StructuredProgram(point(parallel=3, rounds=1))
    first = sends_in(program.start())
    assert len(first) == 1
    free = sends_in(program.ended(first[0], Outcome.of(record_of(first[0], sent=0.0)), 1.0))
    batch = sends_in(program.ended(free[0], Outcome.of(record_of(free[0], sent=1.0)), 2.0))
    assert len(batch) == 3
    assert sends_in(program.ended(batch[0], Outcome.of(record_of(batch[0], sent=2.0)), 3.0)) == []
    assert sends_in(program.ended(batch[1], Outcome.of(record_of(batch[1], sent=2.0)), 3.0)) == []
    assert len(sends_in(program.ended(batch[2], Outcome.of(record_of(batch[2], sent=2.0)), 3.0))) == 3


def test_a_failing_constrained_warm_up_stops_the_point():
    program = StructuredProgram(point())
    sent = drive(program, fail=lambda s: s.phase == "constrained")
    assert len(sent) == 1 and program.stop == STOP_COMPLETE and "failed" in (program.detail or "")


def test_a_tool_set_on_completions_is_not_run():
    program = StructuredProgram(point(mode="tools", endpoint="completions"))
    assert program.start() == [] and program.stop == STOP_SKIPPED
    assert program.detail == "not run: tool calls need the chat endpoint"
