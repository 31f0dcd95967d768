"""The speculative decoding part: the server's acceptance over the run and per point, next to the decode speed."""

from __future__ import annotations

from typing import TypedDict

from cardgen import numbers as fmt
from cardgen.card.table import TableView, median_ci
from cardgen.schemas.summary import SpeculativeDecoding, Summary


class SpeculativeSection(TypedDict):
    run: SpeculativeDecoding
    positions: str  # the run's per-position acceptance, in words
    table: TableView | None


def positions(spec: SpeculativeDecoding) -> str:
    """``83 % / 69 % / 58 %``: acceptance by draft position, from the first."""
    return " / ".join(fmt.pct(p) for p in spec.per_position) or fmt.DASH


def speculative_section(s: Summary) -> SpeculativeSection | None:
    """None when the server drafted nothing (or says nothing of drafts)."""
    if s.speculative is None:
        return None
    rows = []
    for x in s.scenarios:
        spec = x.speculative
        if spec is None or x.not_run:
            continue
        rows.append([x.scenario, fmt.pct(spec.acceptance_rate), fmt.sig(spec.mean_accepted_tokens),
                     fmt.sig(spec.mean_acceptance_length), positions(spec), median_ci(x.decode_tok_s, fmt.tok_s),
                     fmt.integer(spec.drafts)])
    table = TableView(["Scenario", "Acceptance rate", "Accepted tokens per draft", "Tokens per step",
                       "Acceptance by position", "Decode speed median (95 % CI)", "Drafts"], rows,
                      ["l"] + ["r"] * 6) if rows else None
    return SpeculativeSection(run=s.speculative, positions=positions(s.speculative), table=table)
