"""The structured kind's shape and judge: what a constrained request's body carries, how an answer is judged
against its schema or tool set, what the virtual server is told; and the bad inputs a suite may hold."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cardgen.errors import UsageError
from cardgen.kinds.program import Send
from cardgen.kinds.shape import NO_COST, Answer
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.structured.schemas import FLAT, SHIPPED, TOOLSET, judge_json, judge_tools, spec_of
from cardgen.kinds.structured.shape import SHAPE
from cardgen.points import Point, expand
from cardgen.suite import parse_suite

C = Send(prompt_tokens=8, output_tokens=16, extra={"constrained": True})
F = Send(prompt_tokens=8, output_tokens=16, extra={"constrained": False})


def point(name: str = "flat", endpoint: str = "chat") -> Point:
    spec = spec_of(name)
    return Point(name="s", group="g", endpoint=endpoint, timeout_s=10.0, prompt_tokens=8, output_tokens=16,
                 parallel=1, params=replace(StructuredParams(), schema=spec.label, mode=spec.mode,
                                            definition=spec.definition, rounds=1, decode_factor=1.5))


def body() -> dict:
    return {"model": "m", "max_tokens": 16, "min_tokens": 16, "ignore_eos": True, "messages": []}


def test_a_constrained_json_request_carries_its_schema():
    b = body()
    SHAPE.body(point(), C, b)
    assert b["response_format"] == {"type": "json_schema", "json_schema": {"name": "flat", "schema": FLAT,
                                                                           "strict": True}}
    assert b["max_tokens"] == 16 and "json_schema" not in b
    b = body()
    SHAPE.body(point(endpoint="completions"), C, b)
    assert b["json_schema"] == FLAT  # llama.cpp's /v1/completions field


def test_a_free_request_is_left_as_the_load_engine_made_it():
    b = body()
    SHAPE.body(point(), F, b)
    assert b == body()
    assert SHAPE.read(point(), F, Answer(status=200, text="x")) == {}
    assert SHAPE.virtual(point(), F) is NO_COST


def test_a_tool_request_must_call_one_tool():
    b = body()
    SHAPE.body(point("tools"), C, b)
    assert b["tools"] == TOOLSET and b["tool_choice"] == "required" and b["parallel_tool_calls"] is False


def test_answers_are_judged_against_the_schema():
    assert judge_json('{"name": "ada", "age": 36, "active": true}', FLAT).valid
    bad = judge_json('{"name": "ada", "age": 360, "active": true}', FLAT)
    assert bad.parsed and not bad.valid and "age" in (bad.problem or "")
    raw = judge_json('{"name": "a\x01", "age": 1, "active": true}', FLAT)  # a raw control character: not JSON
    assert not raw.parsed and (raw.problem or "").startswith("not JSON")
    read = SHAPE.read(point(), C, Answer(status=200, text='{"name": 1}'))
    assert read["answered"] and read["parsed"] and not read["valid"] and read["answer"] == '{"name": 1}'
    assert SHAPE.read(point(), C, Answer(status=400, error="HTTP 400: no")) == {"answered": False}


def test_tool_calls_are_judged_against_the_declared_tools():
    ok = judge_tools(({"name": "search", "arguments": '{"query": "cats", "limit": 3}'},), "", TOOLSET)
    assert ok.valid and ok.tool == "search"
    assert judge_tools((), "some text", TOOLSET).problem == "no tool call (a text answer of 9 characters)"
    assert "not declared" in (judge_tools(({"name": "rm", "arguments": "{}"},), "", TOOLSET).problem or "")
    args = judge_tools(({"name": "search", "arguments": '{"query": "cats"'},), "", TOOLSET)
    assert not args.parsed and "arguments not JSON" in (args.problem or "")
    wrong = judge_tools(({"name": "get_weather", "arguments": '{"city": "oslo", "unit": "kelvin"}'},), "", TOOLSET)
    assert wrong.parsed and not wrong.valid and "unit" in (wrong.problem or "")


def test_the_virtual_server_is_told_the_decode_factor_and_the_tools_tokens():
    cost = SHAPE.virtual(point(), C)
    assert cost.decode_factor == 1.5 and cost.prompt_tokens == 0 and cost.record == {"modelled": True}
    assert SHAPE.virtual(point("tools"), C).prompt_tokens == -(-len(json.dumps(TOOLSET, sort_keys=True)) // 4)


def suite(schemas: str, endpoint: str = "chat") -> None:
    parse_suite(f"name: x\nendpoint: {endpoint}\nscenarios:\n  - kind: structured\n    schemas: {schemas}\n",
                source="x.yaml")


def test_shipped_schemas_are_bounded_and_valid():
    for name in SHIPPED:
        spec_of(name)  # check_schema passes
    assert '"maxItems"' in spec_of("nested").definition and '"pattern"' in spec_of("flat").definition


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "does not parse as JSON"),
    ('{"type": 12}', "is not a valid JSON Schema"),
    ("[]", "the tool set is empty"),
    ('[{"type": "function", "function": {}}]', "has no function.name"),
])
def test_a_schema_file_that_cannot_be_used_is_a_one_line_error(tmp_path, content, words):
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        suite(f"[{path}]")
    assert words in str(err.value) and "Traceback" not in str(err.value)


def test_a_schema_that_is_no_name_and_no_file_is_a_one_line_error(tmp_path):
    with pytest.raises(UsageError, match="name one of flat, nested, tools or a .json file"):
        suite("[flatt]")
    with pytest.raises(UsageError, match="cannot read it"):
        suite(f"[{tmp_path / 'missing.json'}]")


def test_a_tool_set_needs_the_chat_endpoint():
    with pytest.raises(UsageError, match="a tool set needs 'endpoint: chat'"):
        parse_suite("name: x\nscenarios:\n  - kind: structured\n    endpoint: completions\n    schemas: [tools]\n",
                    source="x.yaml")


def test_a_file_schema_makes_points_of_its_own(tmp_path):
    path = tmp_path / "My Order.json"
    path.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    parsed = parse_suite(f"name: x\nscenarios:\n  - kind: structured\n    schemas: ['{path}']\n    parallel: [2]\n",
                         source="x.yaml")
    (only,) = expand(parsed)
    assert only.name == "structured-my-order-in256-out128-p2" and only.parallel == 2
    assert json.loads(only.params.definition) == {"type": "object", "properties": {"n": {"type": "integer"}}}


def test_an_answer_max_tokens_ended_before_its_json_closed_is_cut_off_not_just_invalid():
    cut = SHAPE.read(point(), C, Answer(status=200, text='{"name": "ab', finish_reason="length"))
    assert cut["parsed"] is False and cut["cut_off"] is True
    wrong = SHAPE.read(point(), C, Answer(status=200, text='{"name": "ab', finish_reason="stop"))
    assert wrong["parsed"] is False and "cut_off" not in wrong


def test_a_text_answer_is_unshaped_not_cut_off_and_whitespace_or_a_json_start_is_not():
    text = SHAPE.read(point(), C, Answer(status=200, text="devGet broGet bro", finish_reason="length"))
    assert text["unshaped"] is True and "cut_off" not in text and text["parsed"] is False
    for start in ('{"name": "ab', "  \n ", '["a', "-1", "null,"):
        read = SHAPE.read(point(), C, Answer(status=200, text=start, finish_reason="length"))
        assert "unshaped" not in read, start
    no_call = SHAPE.read(point("tools"), C, Answer(status=200, text="hello", finish_reason="length"))
    assert no_call["unshaped"] is True and "cut_off" not in no_call
