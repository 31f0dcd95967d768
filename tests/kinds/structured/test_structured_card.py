"""The structured kind on the virtual server: its analysis (summary.json ``kinds.structured``), its figure and its
card section, labelled modelled; the decode factor is the overhead the virtual server shows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.card.render import render_card
from cardgen.figures.kindparts import kind_figures
from cardgen.kinds.structured.analysis import StructuredOutputs, overhead, point_result, wilson
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.structured.section import point_section
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord
from cardgen.sim.config import SimConfig
from cardgen.suite import parse_suite

SUITE = """name: structured
endpoint: chat
scenarios:
  - kind: structured
    schemas: [flat, tools]
    prompt_tokens: 128
    output_tokens: 32
    parallel: [1, 4]
    rounds: 2
    modelled_decode_factor: 1.5
"""


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    simulate(parse_suite(SUITE, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"), run_dir=run_dir)
    return analyse(load_run(run_dir))


def test_each_point_has_both_arms_and_the_modelled_overhead(analysis):
    result = StructuredOutputs.model_validate(analysis.summary.kinds["structured"])
    assert [(p.schema_name, p.parallel) for p in result.points] == [("flat", 1), ("flat", 4), ("tools", 1),
                                                                     ("tools", 4)]
    assert [(a.arm, a.requests, a.failed) for a in result.points[0].arms] == [("constrained", 2, 0), ("free", 2, 0)]
    for p in result.points:
        assert [a.requests for a in p.arms] == [2 * p.parallel] * 2
        # the decode steps of constrained requests take 1.5x: TPOT +50 %, nothing on a json point's TTFT
        assert p.tpot_overhead == pytest.approx(0.5, abs=0.05)
        assert p.validity_modelled and p.valid_share is None and p.failures == []
    assert result.points[0].ttft_overhead == pytest.approx(0.0, abs=0.05)
    tools = result.points[2]
    assert tools.arms[0].prompt_tokens > tools.arms[1].prompt_tokens  # the tool set's tokens, modelled
    assert result.modelled_decode_factor == 1.5 and result.backend is None


def test_the_card_says_modelled_and_the_figure_is_drawn(analysis):
    card = render_card(analysis, date="2026-12-02")
    section = card.split("## Structured output and tool calls")[1].split("\n## ")[0]
    assert "**Modelled, not measured.**" in section and "1.5 times a free one's" in section
    assert "### structured-flat-in128-out32-p4" in section and "| constrained | 8 | 0 |" in section
    assert "TPOT overhead: +50" in section and "not modelled (the virtual server writes no text)" in section
    assert list(kind_figures(analysis.summary)) == ["structured_overhead.png"]


def test_overhead_and_wilson_intervals():
    value, ci = overhead([2.0, 2.1, 1.9, 2.0], [1.0, 1.1, 0.9, 1.0])
    assert value == pytest.approx(1.0) and ci is not None and ci[0] <= value <= ci[1]
    assert overhead([], [1.0]) == (None, None)
    low, high = wilson(16, 22)
    assert low < 16 / 22 < high and wilson(0, 0) is None
    assert wilson(10, 10)[1] == pytest.approx(1.0)


def test_a_server_that_refuses_the_fields_is_not_supported_and_nothing_crashes():
    point = Point(name="s", group="g", endpoint="chat", timeout_s=10.0, prompt_tokens=8, output_tokens=4,
                  parallel=1, params=replace(StructuredParams(), schema="flat", rounds=1))

    def rec(phase: str, ok: bool, *, warmup: bool = False) -> RequestRecord:
        return RequestRecord(scenario="s", kind="structured", prompt_tokens_target=8, output_tokens_target=4,
                             sent_at=0.0, first_token_at=0.1 if ok else None, end_at=0.2,
                             chunk_times=[0.1, 0.15, 0.2] if ok else [], output_tokens=3 if ok else None,
                             status=200 if ok else 400, phase=phase, warmup=warmup, repeat=None if warmup else 0,
                             error=None if ok else "HTTP 400: response_format is not supported",
                             error_kind=None if ok else "http_status",
                             extra={"constrained": phase == "constrained"} if ok else {"constrained": True,
                                                                                      "answered": False})

    p = point_result(point, [rec("constrained", False, warmup=True), rec("free", True, warmup=True)], modelled=False)
    assert p is not None
    assert p.unsupported == "not supported by this server: HTTP 400: response_format is not supported"
    assert p.answered == 0 and p.valid_share is None and p.failures[0].problem.startswith("request failed: HTTP 400")
    assert p.ttft_overhead is None  # no steady rounds: nothing to compare
    words = point_section(p)
    assert words["valid"] == "no constrained answer came back" and words["ttft"].startswith("not measured")


def test_a_server_that_answers_without_the_constraint_is_said_to_ignore_it():
    point = Point(name="s", group="g", endpoint="chat", timeout_s=10.0, prompt_tokens=8, output_tokens=4,
                  parallel=1, params=replace(StructuredParams(), schema="flat", rounds=1))

    def rec(phase: str, extra: dict, *, warmup: bool = False) -> RequestRecord:
        return RequestRecord(scenario="s", kind="structured", prompt_tokens_target=8, output_tokens_target=4,
                             sent_at=0.0, first_token_at=0.1, end_at=0.2, chunk_times=[0.1, 0.15, 0.2],
                             output_tokens=3, status=200, phase=phase, warmup=warmup, repeat=None if warmup else 0,
                             extra=extra)

    text = {"constrained": True, "answered": True, "parsed": False, "valid": False, "unshaped": True,
            "problem": "not JSON: Expecting value", "answer": "devGet bro"}
    recs = [rec("constrained", text, warmup=True), rec("free", {"constrained": False}, warmup=True),
            rec("constrained", text), rec("free", {"constrained": False})]
    p = point_result(point, recs, modelled=False)
    assert p is not None and p.unsupported is None and p.cut_off == 0
    assert p.ignored == ("The server seems to ignore the constraint: none of the 2 constrained answers began as "
                         "JSON (it took the fields and answered as if unconstrained).")
    assert point_section(p)["ignored"] == p.ignored
    shaped = {**text, "unshaped": False}  # one answer that began as JSON: no such words
    again = point_result(point, [*recs, rec("constrained", shaped)], modelled=False)
    assert again is not None and again.ignored is None
