"""A kind's prompt plan (``Kind.shared_spans``) is the one both interpreters follow: the virtual server hashes a
prompt's shared spans as the same blocks (cardgen.sim.drive), and the load engine's prompt texts
(cardgen.datasets.resolve) are the same text exactly as far as the plan says two requests share, and no further."""

from __future__ import annotations

import os

import pytest

from cardgen.datasets import resolve
from cardgen.kinds import kind_of
from cardgen.kinds.program import Send
from cardgen.points import expand
from cardgen.prompts import ID_SLOT, request_id
from cardgen.sim import tokenizer
from cardgen.suite import parse_suite

SLACK = 2  # tokens: the words where the shared text ends and a request's own begins ("Request" before its id)


def planned_common(a: Send, b: Send, point) -> int:
    """The tokens the plan says two requests share from their heads: their leading spans of one key."""
    plan = kind_of(point).shared_spans
    tokens = 0
    for x, y in zip(plan(point, a), plan(point, b), strict=False):
        if x.key != y.key:
            break
        tokens += min(x.tokens, y.tokens)
    return tokens


@pytest.mark.parametrize("entry,sends", [
    ("{kind: prefix, prefixes: 3, prefix_tokens: 96, suffix_tokens: 24, output_tokens: 4, warm_rounds: 1}",
     lambda point: [Send(prompt_tokens=point.items[k][0], output_tokens=4, item=k, prefix=k) for k in (0, 1, 2, 0, 1)]),
    ("{kind: open, dataset: mooncake-sample, max_requests: 40}",
     lambda point: [Send(prompt_tokens=p, output_tokens=o, item=i) for i, (p, o) in enumerate(point.items)]),
])
def test_the_load_engines_texts_share_what_the_plan_says(entry, sends):
    (point,) = expand(parse_suite(f"name: plan\nscenarios:\n  - {entry}\n", source="test suite"))
    (point,), texts = resolve([point], counter=lambda _: tokenizer.count_text, tag=7)
    prompts = texts[point.text_key()]
    requests = sends(point)
    rendered = [prompts[s.item].replace(ID_SLOT, request_id(7, 0, n), 1) for n, s in enumerate(requests)]
    shared = 0
    for i in range(len(requests)):
        for j in range(i + 1, len(requests)):
            planned = planned_common(requests[i], requests[j], point)
            common = tokenizer.count_text(os.path.commonprefix([rendered[i], rendered[j]]))
            assert planned - SLACK <= common <= planned + SLACK, (i, j, planned, common)
            shared += planned > 0
    assert shared >= 2  # the plan has requests that share, and ones that do not


def test_a_prompt_of_a_kind_without_a_plan_shares_nothing():
    (point,) = expand(parse_suite("name: plan\nscenarios:\n  - {kind: closed, prompt_tokens: 8, output_tokens: 2, "
                                  "parallel: 1}\n", source="test suite"))
    assert kind_of(point).shared_spans(point, Send(prompt_tokens=8, output_tokens=2)) == ()
