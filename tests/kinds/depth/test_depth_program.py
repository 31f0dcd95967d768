"""The depth kind's suite entry and program, driven directly (no clock, no server): a point per depth, the fill
first (the whole prompt, as the requests are, as a warm-up), a pause, then the requests at depth one at a time; its prompt plan
shares the depth's tokens and nothing at depth 0."""

from __future__ import annotations

from dataclasses import replace

import pytest
from programkit import point_of, record_of, sends_in

from cardgen.errors import UsageError
from cardgen.kinds import kind_of, program_for
from cardgen.kinds.depth import DepthParams, depth_spans
from cardgen.kinds.depth.program import PHASE_PAUSE_S
from cardgen.outcome import Outcome
from cardgen.points import expand
from cardgen.suite import parse_suite


def _suite(entry: str):
    return parse_suite(f"name: d\nscenarios:\n  - {entry}\n", source="x")


def test_an_entry_is_a_point_per_depth_in_depth_order():
    points = expand(_suite("{kind: depth, depths: [4096, 0, 1024], prompt_tokens: 256, output_tokens: 32}"))
    assert [p.name for p in points] == ["depth-d0-p256-n32", "depth-d1024-p256-n32", "depth-d4096-p256-n32"]
    assert [p.prompt_tokens for p in points] == [256, 1280, 4352]
    assert all(p.output_tokens == 32 and p.brings_prompts and p.prompt_lengths() == [] for p in points)
    assert points[2].params == DepthParams(depth=4096, new_tokens=256, repeats=3)
    assert points[2].longest_request() == 4096 + 256 + 32  # before its prompts are made: the planned lengths
    assert kind_of(points[0]).expected_requests(points[0]) == 4


@pytest.mark.parametrize("entry,words", [
    ("{kind: depth, depths: [-1]}", "0 or more"), ("{kind: depth, depths: [0, 0]}", "each depth once"),
    ("{kind: depth, depths: []}", "at least 1"), ("{kind: depth, output_tokens: 1}", "greater than or equal to 2"),
    ("{kind: depth, depth: 4}", "unknown key"),
])
def test_a_bad_entry_is_an_error_that_says_why(entry, words):
    with pytest.raises(UsageError) as err:  # the suite's one-line error
        _suite(entry)
    assert words in str(err.value) and "Traceback" not in str(err.value)


def _point(depth: int = 1024, repeats: int = 3):
    point = point_of("depth", prompt_tokens=depth + 64, output_tokens=16, depth=depth, new_tokens=64,
                     repeats=repeats)
    return replace(point, items=((depth + 66, 16),))  # as cardgen.datasets.resolve sized it


def test_the_fill_then_the_requests_at_depth_one_at_a_time():
    point = _point()
    program = program_for(point)
    (fill,) = sends_in(program.start())
    assert (fill.prompt_tokens, fill.output_tokens, fill.phase, fill.item, fill.at) == (1090, 16, "fill", 0, None)
    assert fill.warmup  # the point's common figures are the requests at depth alone
    now, seen = 1.0, []
    send = fill
    while True:
        commands = program.ended(send, Outcome.of(record_of(send, sent=now - 0.5)), now)
        if not commands:
            break
        (send,) = sends_in(commands)
        seen.append(send)
        now += 1.0
    assert [(s.prompt_tokens, s.output_tokens, s.phase, s.item, s.warmup) for s in seen] == [(1090, 16, "depth", 0, False)] * 3
    assert seen[0].at == pytest.approx(2.0 + PHASE_PAUSE_S - 1.0) and seen[1].at is None  # a pause after the fill
    assert program.stop == "complete" and program.issued == 4


def test_the_prompt_plan_shares_the_depth_and_nothing_at_depth_0():
    point = _point(depth=1024)
    (fill,) = sends_in(program_for(point).start())
    (span,) = depth_spans(point, fill)
    assert span.tokens == 1024 and span.key == ("depth", point.name)
    assert depth_spans(_point(depth=0), fill) == ()
