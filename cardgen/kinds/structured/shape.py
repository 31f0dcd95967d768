"""What a structured point's requests carry (:data:`SHAPE`, a :class:`cardgen.kinds.shape.RequestShape`).

A constrained request (``Send.extra["constrained"]``) carries its point's schema: ``response_format``
``{"type": "json_schema", ...}`` (on completions also llama.cpp's own ``json_schema`` field, which its
``/v1/completions`` reads instead), or its tools with ``tool_choice: "required"`` and ``parallel_tool_calls:
false`` (one call). Its output is not forced to the point's length (the program's ``Send.length_forced``: the
load engine leaves out ``min_tokens`` / ``ignore_eos``): a grammar that has closed its JSON allows only the end of
the answer, so the schema decides its length; ``max_tokens`` stays. A free request is the load engine's plain one.

What the record keeps of a constrained answer (``RequestRecord.extra``): whether it came (``answered``), parsed
and validated, the first problem, the tool it called, and the answer's text (its first 400 characters) where it
did not validate: the run's examples of failure. The virtual server writes no text: its records say
``modelled`` and no verdict; what it models is the decode factor (the point's ``decode_factor``) and, for tools,
the tool set's tokens added to the prompt (its JSON's characters / 4).
"""

from __future__ import annotations

import math
from typing import Any

from cardgen.kinds.program import Send
from cardgen.kinds.shape import NO_COST, Answer, VirtualCost
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.structured.schemas import TOOLS, definition, judge_json, judge_tools
from cardgen.kinds.view import PointView

KEPT_TEXT = 400  # characters of a failing answer the record keeps
CHARS_PER_TOKEN = 4  # the virtual server's count of a tool set's tokens


def constrained(send: Send) -> bool:
    return bool((send.extra or {}).get("constrained"))


class StructuredShape:
    def body(self, point: PointView, send: Send, body: dict[str, Any]) -> None:
        if not constrained(send):
            return
        params = point.params_as(StructuredParams)
        value = definition(params.definition)
        if params.mode == TOOLS:
            body.update(tools=value, tool_choice="required", parallel_tool_calls=False)
            return
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": params.schema or "schema", "schema": value, "strict": True}}
        if point.endpoint != "chat":
            body["json_schema"] = value

    def read(self, point: PointView, send: Send, answer: Answer) -> dict[str, Any]:
        if not constrained(send):
            return {}
        if answer.error is not None:
            return {"answered": False}
        params = point.params_as(StructuredParams)
        value = definition(params.definition)
        verdict = judge_tools(answer.tool_calls, answer.text, value) if params.mode == TOOLS \
            else judge_json(answer.text, value)
        out: dict[str, Any] = {"answered": True, "parsed": verdict.parsed, "valid": verdict.valid}
        if not verdict.shaped:  # nothing of the constraint's shape: a text answer, as if unconstrained
            out["unshaped"] = True
        elif not verdict.parsed and answer.finish_reason == "length":  # max_tokens ended it before the JSON closed
            out["cut_off"] = True
        if verdict.tool is not None:
            out["tool"] = verdict.tool
        if not verdict.valid:
            out["problem"] = verdict.problem
            out["answer"] = answer.text[:KEPT_TEXT] if params.mode != TOOLS or not answer.tool_calls \
                else str(list(answer.tool_calls))[:KEPT_TEXT]
        return out

    def virtual(self, point: PointView, send: Send) -> VirtualCost:
        if not constrained(send):
            return NO_COST
        params = point.params_as(StructuredParams)
        tokens = math.ceil(len(params.definition) / CHARS_PER_TOKEN) if params.mode == TOOLS else 0
        return VirtualCost(prompt_tokens=tokens, decode_factor=params.decode_factor, record={"modelled": True})


SHAPE = StructuredShape()
