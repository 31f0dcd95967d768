"""The prefix cache's part of the card (:data:`SECTION`): each shared-prefix point, cold against warm
(``section.md.j2``), among the workload sections, before the chat's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.table import TableView, median_ci
from cardgen.kinds.prefix.analysis import PrefixCache, PrefixPoint
from cardgen.schemas.summary import Summary


class PrefixSection(TypedDict):
    """One shared-prefix point: cold against warm."""

    scenario: str
    prefixes: int
    prefix_tokens: int
    suffix_tokens: int
    table: TableView
    speedup: str
    counters: str | None


def prefix_section(r: PrefixPoint) -> PrefixSection:
    rows = []
    for ph in r.phases:
        rows.append([ph.phase, str(ph.requests), fmt.sig(ph.prompt_tokens), median_ci(ph.ttft_s, fmt.ms),
                     median_ci(ph.ingest_tok_s, fmt.tok_s),
                     fmt.pct(ph.hit_rate) if ph.hit_rate is not None else fmt.DASH,
                     fmt.tokens(ph.hit_tokens) if ph.hit_tokens is not None else fmt.DASH])
    table = TableView(["Phase", "Requests", "Prompt tokens (median)", "TTFT median (95 % CI)",
                       "Ingestion speed median (95 % CI)", "Server hit rate", "Tokens from cache"], rows,
                      ["l", "r", "r", "r", "r", "r", "r"])
    if r.speedup is None:
        speedup = "not measured (a phase has no successful request)"
    elif r.speedup_ci is None:
        speedup = f"{r.speedup:.2f}x"
    else:
        speedup = f"{r.speedup:.2f}x (95 % CI {r.speedup_ci[0]:.2f}x – {r.speedup_ci[1]:.2f}x)"
    return PrefixSection(scenario=r.scenario, prefixes=r.prefixes, prefix_tokens=r.prefix_tokens,
                         suffix_tokens=r.suffix_tokens, table=table, speedup=speedup, counters=r.counters)


def context(result: PrefixCache, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run's shared-prefix points sent nothing)."""
    return {"prefix": [prefix_section(r) for r in result.points]} if result.points else None


SECTION = KindSection(result=PrefixCache, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads", order=-2)  # the chat's is -1: the prefix cache first, as it always was
