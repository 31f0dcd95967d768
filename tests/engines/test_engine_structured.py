"""Constrained decoding on the real engines (the structured kind): vLLM's CPU build (xgrammar: JSON schema and tool
calls with ``tool_choice: "required"``; guidance: JSON schema, a server of its own) and llama.cpp
(``response_format`` json_schema on chat), each through ``cardgen build``: both arms measured, the answers judged
against their schema, the card's section written."""

from __future__ import annotations

import json

import pytest
from clirun import cardgen
from test_engine_e2e import build_against

from cardgen.kinds.structured.analysis import StructuredOutputs

pytestmark = pytest.mark.engine

SUITE = """name: structured-engine
endpoint: chat
scenarios:
  - {kind: structured, schemas: [flat, tools], prompt_tokens: 64, output_tokens: 128, parallel: [1, 2], rounds: 1}
"""


def _result(out) -> StructuredOutputs:
    return StructuredOutputs.model_validate(json.loads((out / "summary.json").read_text())["kinds"]["structured"])


def _section(out) -> str:
    card = (out / "README.md").read_text("utf-8")
    section = card.split("## Structured output and tool calls")[1].split("\n## ")[0]
    print(section)  # the figures, for the report (pytest -rP)
    return section


def test_vllm_constrains_json_and_tool_calls_and_they_validate(vllm_server, tmp_path_factory):
    out, _, _ = build_against(vllm_server, tmp_path_factory, "structured", SUITE)
    result = _result(out)
    assert [(p.schema_name, p.parallel) for p in result.points] == [("flat", 1), ("flat", 2), ("tools", 1),
                                                                     ("tools", 2)]
    for p in result.points:
        assert [(a.arm, a.requests, a.failed) for a in p.arms] == [("constrained", p.parallel, 0),
                                                                   ("free", p.parallel, 0)]
        assert p.answered == 1 + p.parallel and p.unsupported is None and not p.validity_modelled
        assert p.tpot_overhead is not None and p.ttft_overhead is not None
        constrained, free = p.arms
        assert free.output_tokens == 128 and constrained.output_tokens is not None and constrained.output_tokens < 128
    flat = [p for p in result.points if p.schema_name == "flat"]
    assert all(p.valid == p.answered for p in flat)  # xgrammar on a bounded schema: every answer validates
    tools = [p for p in result.points if p.mode == "tools"]
    assert all(p.parsed == p.answered and sum(p.tools_called.values()) == p.answered for p in tools)
    assert set().union(*(p.tools_called for p in tools)) <= {"get_weather", "search"}
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    called = [r for r in records if r["phase"] == "constrained" and "tools" in r["scenario"]]
    assert called and all(r["finish_reason"] == "tool_calls" and r["chunk_times"] for r in called)  # no "no text"
    section = _section(out)
    assert "TPOT overhead" in section and "answers made a valid call of a declared tool" in section


def test_vllm_constrains_json_with_guidance_and_every_answer_validates(vllm_guidance_server, tmp_path_factory):
    # the other backend of vLLM's CPU build, on the flat and the nested schema (an array and an enum): both arms
    # measured at each count, and guidance lets a random model write only what the schema allows
    suite = SUITE.replace("schemas: [flat, tools]", "schemas: [flat, nested]").replace("parallel: [1, 2]", "parallel: [2]")
    out, _, _ = build_against(vllm_guidance_server, tmp_path_factory, "structured-guidance", suite)
    result = _result(out)
    assert [(p.schema_name, p.parallel) for p in result.points] == [("flat", 2), ("nested", 2)]
    for p in result.points:
        assert [(a.arm, a.requests, a.failed) for a in p.arms] == [("constrained", 2, 0), ("free", 2, 0)]
        assert p.answered == 3 and p.unsupported is None and p.tpot_overhead is not None
        assert p.parsed == p.valid == p.answered, (p.schema_name, p.parsed, p.valid, p.cut_off)
    assert "parsed as JSON and validated" in _section(out)


def test_llamacpp_constrains_json_on_chat(llama_server, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nendpoint: chat\nscenarios:\n  - {kind: structured, schemas: [flat, nested], "
                     "prompt_tokens: 64, output_tokens: 128, parallel: [2], rounds: 2}\n")
    out = tmp_path / "run"
    with llama_server("-np 2 -c 4096") as server:
        done = cardgen("build", "tiny-gguf", "--url", server.url, "--suite", str(suite), "--out", str(out),
                       "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = _result(out)
    assert result.backend is not None and "llama.cpp" in result.backend
    for p in result.points:
        assert [(a.arm, a.requests, a.failed) for a in p.arms] == [("constrained", 4, 0), ("free", 4, 0)]
        # every answer the grammar let close parses (a random model may spend its max_tokens on the whitespace the
        # grammar allows between tokens: cut off, counted apart)
        assert p.answered == 5 and p.parsed + p.cut_off == p.answered and p.valid_share is not None
        assert p.valid_share >= 0.6  # the grammar makes JSON; a random model may still break a bound it cannot see
    assert "parsed as JSON and validated" in _section(out)
