"""The speed at context depth's part of the card (:data:`SECTION`): a table of every depth (ingestion and decode
at depth with their intervals, the engine's own account beside them, whether the server reused the context), the
figure, and in words where the server computed the whole prompt again (``section.md.j2``), among the workload
sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.sections.figures import figure_path
from cardgen.card.table import TableView, median_ci
from cardgen.kinds.depth.analysis import FIGURE, NO_CONTEXT, NOT_REUSED, REUSED, DepthPoint, DepthSpeeds
from cardgen.schemas.summary import Summary


def reuse_text(p: DepthPoint) -> str:
    if p.reuse == NO_CONTEXT:
        return "none to reuse"
    if p.reuse == REUSED:
        return f"yes ({fmt.tokens(p.cached_tokens)})" if p.cached_tokens is not None else "yes"
    if p.reuse == NOT_REUSED:
        return "no: whole prompt computed" + (f" ({fmt.tokens(p.cached_tokens)} from cache)"
                                              if p.cached_tokens else "")
    return "not known"


def depth_table(points: list[DepthPoint]) -> TableView:
    rows = []
    for p in points:
        if p.not_run is not None:
            rows.append([fmt.integer(p.depth), p.not_run] + [""] * 7)
            continue
        rows.append([fmt.integer(p.depth), f"{p.requests}" + (f" ({p.failed} failed)" if p.failed else ""),
                     fmt.ms(p.fill_ttft_s), median_ci(p.ttft_s, fmt.ms), median_ci(p.ingest_tok_s, fmt.tok_s),
                     median_ci(p.decode_tok_s, fmt.tok_s), fmt.tok_s(p.engine_ingest_tok_s),
                     fmt.tok_s(p.engine_decode_tok_s), reuse_text(p)])
    return TableView(["Depth (tokens)", "Requests", "Fill TTFT (cold)", "TTFT median (95 % CI)",
                      "Ingestion at depth median (95 % CI)", "Decode at depth median (95 % CI)",
                      "Engine's ingestion", "Engine's decode", "Context reused"], rows,
                     ["r", "r", "r", "r", "r", "r", "r", "r", "l"])


def context(result: DepthSpeeds, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run has no depth point)."""
    points = result.points
    if not points:
        return None
    ran = [p for p in points if p.not_run is None]
    sources = sorted({p.reuse_from for p in ran if p.reuse_from})
    whole = [p for p in ran if p.reuse == NOT_REUSED]
    return {"table": depth_table(points), "new_tokens": sorted({p.new_tokens for p in points}),
            "output_tokens": sorted({p.output_tokens for p in points}),
            "whole": [f"{fmt.integer(p.depth)} ({fmt.tok_s(p.whole_ingest_tok_s)} over the whole prompt)"
                      for p in whole],
            "sources": sources, "engine": any(p.engine_ingest_tok_s is not None for p in ran),
            "figure": figure_path(s, FIGURE), "modelled": s.modelled}


SECTION = KindSection(result=DepthSpeeds, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads", order=-3)  # before the prefix cache's (-2): its own question comes first
