"""Constrained decoding's part of the card (:data:`SECTION`, ``section.md.j2``): per point, both arms side by side,
the constraint's overhead on TTFT and TPOT with intervals, the valid share and a few failing answers; the backend
where the run says it; labelled modelled for a virtual run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.sections.figures import figure_path
from cardgen.card.table import TableView, median_ci
from cardgen.kinds.structured.analysis import FIGURE, StructuredOutputs, StructuredPoint
from cardgen.schemas.summary import Summary


class PointSection(TypedDict):
    scenario: str
    schema_name: str
    what: str
    parallel: int
    rounds: int
    table: TableView
    ttft: str
    tpot: str
    valid: str
    warmup: str
    unsupported: str | None
    ignored: str | None
    failures: list[str]


def overhead_text(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "not measured (an arm has no successful request)"
    text = fmt.signed_pct(100 * value)
    return f"{text} (95 % CI {fmt.signed_pct(100 * ci[0])} to {fmt.signed_pct(100 * ci[1])})" if ci is not None \
        else text


def valid_text(p: StructuredPoint) -> str:
    if p.validity_modelled:
        return "not modelled (the virtual server writes no text)"
    if not p.answered:
        return "no constrained answer came back"
    ci = f" (95 % CI {fmt.pct(p.valid_ci[0])} – {fmt.pct(p.valid_ci[1])}, Wilson)" if p.valid_ci else ""
    what = "made a valid call of a declared tool" if p.mode == "tools" else "parsed as JSON and validated"
    failed = p.answered - p.valid
    calls = (", calls: " + ", ".join(f"{k} {v}" for k, v in sorted(p.tools_called.items()))) \
        if p.tools_called else ""
    cut = f"; {p.cut_off} cut off by max_tokens before the JSON closed" if p.cut_off else ""
    return (f"{fmt.pct(p.valid_share)}{ci}: {p.valid} of {p.answered} answers {what}; {failed} did not "
            f"({p.parsed} parsed{cut}){calls}")


def point_section(p: StructuredPoint) -> PointSection:
    rows = [[a.arm, str(a.requests), str(a.failed), fmt.sig(a.prompt_tokens), fmt.sig(a.output_tokens),
             median_ci(a.ttft_s, fmt.ms), median_ci(a.tpot_s, fmt.ms), fmt.tok_s(a.throughput_tok_s)]
            for a in p.arms]
    table = TableView(["Arm", "Requests", "Failed", "Prompt tokens", "Output tokens", "TTFT median (95 % CI)",
                       "TPOT median (95 % CI)", "Throughput"], rows, ["l", "r", "r", "r", "r", "r", "r", "r"])
    warm = p.warmup_ttft_s
    warmup = (f"constrained {fmt.ms(warm.get('constrained'))}, free {fmt.ms(warm.get('free'))}"
              if warm.get("constrained") is not None or warm.get("free") is not None else fmt.DASH)
    what = ("a call of one of its tools (tool_choice required)" if p.mode == "tools"
            else "its JSON schema (response_format json_schema)")
    failures = [f"{f.problem}" + (f": `{' '.join((f.answer or '').split())[:120]}`" if f.answer else "")
                for f in p.failures]
    return PointSection(scenario=p.scenario, schema_name=p.schema_name, what=what, parallel=p.parallel,
                        rounds=p.rounds, table=table, ttft=overhead_text(p.ttft_overhead, p.ttft_overhead_ci),
                        tpot=overhead_text(p.tpot_overhead, p.tpot_overhead_ci), valid=valid_text(p),
                        warmup=warmup, unsupported=p.unsupported, ignored=p.ignored, failures=failures)


def context(result: StructuredOutputs, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run's structured points sent nothing)."""
    if not result.points:
        return None
    return {"points": [point_section(p) for p in result.points], "backend": result.backend,
            "modelled": s.modelled, "factor": result.modelled_decode_factor,
            "figure": figure_path(s, FIGURE)}


SECTION = KindSection(result=StructuredOutputs, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads", order=1)
