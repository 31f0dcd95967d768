"""The Reasoning section: a reasoning model's time to first answer token next to its TTFT, its reasoning and
answer tokens, and their speeds, per point."""

from __future__ import annotations

from typing import TypedDict

from cardgen import numbers as fmt
from cardgen.card.table import TableView, median_ci
from cardgen.schemas.summary import Summary


class ReasoningSection(TypedDict):
    table: TableView
    sources: str  # where the reasoning token counts came from, in words
    unanswered: int  # requests whose output ended inside the reasoning, over the run


SOURCES = {"usage": "the server's usage (completion_tokens_details.reasoning_tokens)",
           "tokenize": "the server's /tokenize of the reasoning text (the server's usage counted none)"}


def reasoning_section(s: Summary) -> ReasoningSection | None:
    """None when the run's model did not reason."""
    if not s.reasoning:
        return None
    rows = []
    for x in s.scenarios:
        if x.not_run or not (x.reasoning_tokens_mean or x.unanswered):  # a point whose requests did not reason
            continue
        rows.append([x.scenario, str(x.ttft_s.n), median_ci(x.ttft_s, fmt.ms), median_ci(x.ttfa_s, fmt.ms),
                     fmt.ms(x.ttfa_s.p90), fmt.sig(x.reasoning_tokens_mean), fmt.sig(x.answer_tokens_mean),
                     median_ci(x.reasoning_tok_s, fmt.tok_s), median_ci(x.answer_tok_s, fmt.tok_s),
                     str(x.unanswered)])
    table = TableView(["Scenario", "Requests", "TTFT median (95 % CI)", "Time to first answer token median (95 % CI)",
                       "TTFA p90", "Reasoning tokens (mean)", "Answer tokens (mean)", "Reasoning speed median",
                       "Answer speed median", "No answer"], rows, ["l"] + ["r"] * 9)
    used = sorted({part for x in s.scenarios for part in (x.reasoning_tokens_source or "").split(" and ") if part})
    return ReasoningSection(table=table, sources="; ".join(SOURCES.get(u, u) for u in used) or "none: the server "
                            "counted no reasoning token and has no /tokenize",
                            unanswered=sum(x.unanswered for x in s.scenarios))
