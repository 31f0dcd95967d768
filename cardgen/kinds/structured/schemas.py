"""The schemas a structured point constrains its answers to, and the judge of an answer against one (pure).

A suite names a schema by a shipped name (:data:`SHIPPED`) or a ``.json`` file: a JSON Schema object (the answer
is constrained to it with ``response_format``), or a tool-call set (a JSON list of OpenAI ``tools``, or an object
with a ``tools`` list: the answer must call one of them, ``tool_choice: "required"``). The shipped ones are bounded
(patterns on strings, ranges on integers, ``maxItems`` on arrays): a random-weight model loops inside an unbounded
value until ``max_tokens``, and a real model is not slowed by the bounds.

An answer is judged as a client would: its text parses as JSON (strict: raw control characters inside strings
are not JSON) and validates against the schema (``jsonschema``, the schema's own draft); a tool call names a
declared tool and its arguments parse and validate against that tool's parameters.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsonschema

Mode = Literal["json", "tools"]
JSON: Mode = "json"
TOOLS: Mode = "tools"

_WORD = {"type": "string", "pattern": "^[a-z]{1,12}$"}

FLAT: dict[str, Any] = {
    "type": "object",
    "properties": {"name": _WORD, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "active": {"type": "boolean"}},
    "required": ["name", "age", "active"], "additionalProperties": False,
}
NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 9999},
        "status": {"type": "string", "enum": ["open", "closed", "pending"]},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,8}$"}, "maxItems": 3},
        "owner": {"type": "object", "properties": {"name": _WORD, "level": {"type": "integer", "minimum": 1,
                                                                             "maximum": 5}},
                  "required": ["name", "level"], "additionalProperties": False},
    },
    "required": ["id", "status", "tags", "owner"], "additionalProperties": False,
}
TOOLSET: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": _WORD, "unit": {"type": "string",
                                                                                "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the documents.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "pattern": "^[a-z ]{1,24}$"},
                                                        "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                       "required": ["query", "limit"], "additionalProperties": False}}},
]
# the shipped schemas by the name a suite gives them: a flat object, a nested object with an array and an enum, and
# a tool-call set
SHIPPED: dict[str, tuple[Mode, Any]] = {"flat": (JSON, FLAT), "nested": (JSON, NESTED), "tools": (TOOLS, TOOLSET)}


class SchemaError(ValueError):
    """A schema a suite names that cannot be used: one line that says why."""


@dataclass(frozen=True, slots=True)
class Spec:
    """One schema as a point holds it: its label, its mode and its definition as canonical JSON text."""

    label: str
    mode: Mode
    definition: str


def _label(source: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", Path(source).stem.lower()).strip("-") or "schema"


def spec_of(source: str) -> Spec:
    """The schema ``source`` names (a shipped name or a ``.json`` file); a :class:`SchemaError` in one line for a
    name that is neither, a file that does not read or parse, or a schema that is not one."""
    if source in SHIPPED:
        shipped_mode, shipped = SHIPPED[source]
        return Spec(source, shipped_mode, json.dumps(shipped, sort_keys=True))
    path = Path(source)
    if path.suffix.lower() != ".json":
        raise SchemaError(f"schema {source!r}: name one of {', '.join(SHIPPED)} or a .json file")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SchemaError(f"schema {source!r}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SchemaError(f"schema {source!r} does not parse as JSON: {str(exc).splitlines()[0]}") from None
    if isinstance(value, dict) and isinstance(value.get("tools"), list):
        value = value["tools"]
    mode: Mode = TOOLS if isinstance(value, list) else JSON
    spec = Spec(_label(source), mode, json.dumps(value, sort_keys=True))
    check(spec, source)
    return spec


def check(spec: Spec, source: str) -> None:
    """A :class:`SchemaError` where ``spec`` is no JSON Schema (json) or no set of named function tools whose
    parameters are JSON Schemas (tools)."""
    value = json.loads(spec.definition)
    if spec.mode == JSON:
        if not isinstance(value, dict):
            raise SchemaError(f"schema {source!r}: a JSON Schema is an object")
        _check_schema(value, source)
        return
    if not value:
        raise SchemaError(f"schema {source!r}: the tool set is empty")
    names = set()
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise SchemaError(f"schema {source!r}: tool {i} has no function.name")
        if name in names:
            raise SchemaError(f"schema {source!r}: tool {name!r} is declared twice")
        names.add(name)
        assert isinstance(function, dict)
        _check_schema(function.get("parameters", {"type": "object"}), f"{source}: tool {name}")


def _check_schema(schema: Any, source: str) -> None:
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SchemaError(f"schema {source!r} is not a valid JSON Schema: {exc.message}") from None


@functools.lru_cache(maxsize=64)
def definition(text: str) -> Any:
    """A point's definition (canonical JSON text) as the object it holds."""
    return json.loads(text)


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    return jsonschema.validators.validator_for(schema)(schema)


def _problem(value: Any, schema: Any) -> str | None:
    """The first way ``value`` breaks ``schema`` (at its path), or None."""
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{'at ' + where + ': ' if where else ''}{error.message}"[:200]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One constrained answer, judged: whether it parsed as JSON (a tool call: that it made one, of a declared tool,
    whose arguments parse), whether it validated, why not (the first problem), the tool it called, and whether it
    has the constraint's shape at all (``shaped``: a JSON text begins as a JSON value, or only whitespace came, as a
    grammar allows; a tool answer made a call): an answer that does not is one no constraint shaped."""

    parsed: bool
    valid: bool
    problem: str | None = None
    tool: str | None = None
    shaped: bool = True


def begins_as_json(text: str) -> bool:
    """Whether ``text`` could be the start of a JSON value (or holds only whitespace): what a grammar made of a
    JSON schema lets a model write, even one cut off before it closed."""
    s = text.strip()
    return not s or s[0] in '{["-0123456789' or s.startswith(("true", "false", "null"))


def judge_json(text: str, schema: Any) -> Verdict:
    """An answer constrained to ``schema``."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return Verdict(parsed=False, valid=False, problem=f"not JSON: {str(exc).splitlines()[0]}"[:200],
                       shaped=begins_as_json(text))
    problem = _problem(value, schema)
    return Verdict(parsed=True, valid=problem is None, problem=problem)


def judge_tools(calls: tuple[dict[str, str], ...], text: str, tools: Any) -> Verdict:
    """An answer that had to call one of ``tools``: its calls (each ``{"name", "arguments"}``, the arguments as
    text); every call must name a declared tool with arguments valid against its parameters."""
    if not calls:
        return Verdict(parsed=False, valid=False, shaped=False,
                       problem="no tool call" + (f" (a text answer of {len(text)} characters)" if text else ""))
    declared = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in tools}
    for call in calls:
        name = call.get("name", "")
        if name not in declared:
            return Verdict(parsed=True, valid=False, problem=f"calls {name!r}, which is not declared"[:200],
                           tool=name or None)
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except ValueError as exc:
            return Verdict(parsed=False, valid=False, tool=name,
                           problem=f"{name}: arguments not JSON: {str(exc).splitlines()[0]}"[:200])
        problem = _problem(arguments, declared[name])
        if problem is not None:
            return Verdict(parsed=True, valid=False, problem=f"{name}: {problem}"[:200], tool=name)
    return Verdict(parsed=True, valid=True, tool=calls[0].get("name"))
