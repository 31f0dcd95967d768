"""The closed loop's part of the card (:data:`SECTION`, ``section.md.j2``), after the cost and calibration sections:
the total generation speed (its figure and FlexGen's scale table), throughput against interactivity (its figure and
table, the Pareto fronts marked), and per prompt / output pair the speed and latency against parallel requests
(its figure, its table, the points not run), with the capacity thresholds its analysis found."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from markupsafe import Markup

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.sections.figures import figure_path
from cardgen.card.sections.frames import scale_view
from cardgen.card.sections.point_text import basis_mark, precision_text, steady_text, stop_text
from cardgen.card.sections.time_budget import PART_LABELS, duration
from cardgen.card.table import TableView
from cardgen.kinds import of_kind
from cardgen.kinds.closed import CLOSED
from cardgen.kinds.closed.analysis import ClosedResult, scale_table
from cardgen.kinds.closed.figures import TOTAL_THROUGHPUT, pair_figure_name
from cardgen.schemas.summary import ScenarioSummary, Summary
from cardgen.sweeps import INTERACTIVITY_FIGURE, sweep_pairs, throughput_interactivity


class PairSection(TypedDict):
    title: str
    figure: Markup | None
    table: TableView
    not_run: list[str]  # the pair's points that were not run, each with why


def pair_sections(s: Summary) -> list[PairSection]:
    """A section per prompt / output pair of the closed-loop points: its figure, its table, the points not run."""
    return [
        PairSection(title=f"{prompt} prompt tokens, {output} generated tokens",
                    figure=figure_path(s, pair_figure_name((prompt, output))), table=_pair_table(points),
                    not_run=_not_run(s, (prompt, output)))
        for (prompt, output), points in sweep_pairs(s.scenarios, CLOSED.name).items()
    ]


def _pair_table(points: Sequence[ScenarioSummary]) -> TableView:
    rows = []
    for p in points:
        sp = p.speed_from_start_tok_s
        rows.append([
            str(p.parallel) + basis_mark(p), str(p.requests), steady_text(p), str(p.failed), fmt.sig(sp.p50),
            fmt.interval(sp.p50_ci_low, sp.p50_ci_high), fmt.interval(sp.p25, sp.p75), fmt.sig(p.decode_tok_s.p50),
            fmt.ms(p.ttft_s.p50), fmt.ms(p.ttft_s.p90), fmt.ms(p.tpot_s.p50), fmt.ms(p.itl_s.p50),
            fmt.secs(p.e2e_s.p50), fmt.sig(p.output_tok_s), fmt.pct(p.kv_usage_max), precision_text(p),
        ])
    return TableView(["Parallel", "Requests", "Steady", "Failed", "Speed from start p50 (tok/s)", "95 % CI",
                      "p25–p75", "Decode p50 (tok/s)", "TTFT p50", "TTFT p90", "TPOT p50", "ITL p50", "E2E p50",
                      "Total output (tok/s)", "Max KV usage", "Precision (speed / TTFT)"], rows)


def _not_run(s: Summary, pair: tuple[int, int]) -> list[str]:
    """The closed-loop points of a prompt / output pair that sent no request, grouped by why: "8, 16
    parallel: the server saturated at 4 parallel (KV cache 97% full)"."""
    why: dict[str, list[str]] = {}
    for x in of_kind(CLOSED.name, s.scenarios):
        if x.requests == 0 and (x.prompt_tokens, x.output_tokens) == pair:
            reason = stop_text(x, s.scenarios).removeprefix("not run").removeprefix(": ")
            why.setdefault(reason, []).append(str(x.parallel))
    lines = [f"{', '.join(counts)} parallel" + (f": {reason}" if reason else "") for reason, counts in why.items()]
    slow = any("slow per request" in reason for reason in why)
    ran = [x for x in of_kind(CLOSED.name, s.scenarios) if x.requests and (x.prompt_tokens, x.output_tokens) == pair]
    budget = s.time_budget.of(min(ran, key=lambda x: x.parallel or 0).scenario) if slow and ran else None
    if budget is not None:
        parts = ", ".join(f"{PART_LABELS[p.part].lower()} {duration(p.seconds)} ({fmt.pct(p.share)})"
                          for p in budget.parts if p.seconds is not None and (p.share or 0) >= 0.01)
        lines.append(f"where {budget.scope}'s time to first token ({duration(budget.client_ttft_s)}) went: {parts}")
    return lines


def capacity_table(result: ClosedResult | None) -> TableView | None:
    if result is None or not result.capacity:
        return None
    rows = []
    for c in result.capacity:
        def bound(value: int | None, is_open: bool) -> str:
            if value is None:
                return "unknown"
            if value == 0:
                return "none tested"
            return f"≥ {value}" if is_open else str(value)
        rows.append([f"{c.prompt_tokens} / {c.output_tokens}", ", ".join(map(str, c.parallel_tested)),
                     bound(c.max_parallel_at_min_speed, c.speed_bound_open),
                     bound(c.max_parallel_below_kv_usage, c.kv_bound_open)])
    c0 = result.capacity[0]
    return TableView(["Prompt / output tokens", "Parallel tested",
                      f"Most parallel at ≥ {fmt.sig(c0.min_speed_tok_s)} tok/s each",
                      f"Most parallel below {fmt.pct(c0.max_kv_usage)} KV usage"], rows, ["l", "l", "r", "r"])


def interactivity_table(s: Summary) -> TableView | None:
    """Throughput against interactivity, point by point (the figure's data), with the Pareto fronts marked."""
    rows = []
    for c in throughput_interactivity(s.scenarios, gpus=s.gpu_count):
        for i, n in enumerate(c.parallel):
            rows.append([f"{c.pair[0]} / {c.pair[1]}", f"{n:.0f}", fmt.sig(float(c.tok_s_per_user[i])),
                         fmt.ms(float(c.ttft_s[i])), fmt.sig(float(c.tok_s_per_gpu[i])),
                         "yes" if c.front_user[i] else "no", "yes" if c.front_ttft[i] else "no"])
    if not rows:
        return None
    return TableView(["Prompt / output tokens", "Parallel", "Tokens/s per user", "TTFT p50", "Output tokens/s per GPU",
                      "Front (per user)", "Front (TTFT)"], rows, ["l", "r", "r", "r", "r", "l", "l"])


def context(result: ClosedResult | None, s: Summary) -> dict[str, Any]:
    """What ``section.md.j2`` prints (shown for every run: a run without closed-loop points says so)."""
    scale = scale_table(s.scenarios, kv_cache_tokens=s.kv_cache.tokens)
    return {"s": s, "figures": {"total_throughput": figure_path(s, TOTAL_THROUGHPUT),
                                "throughput_interactivity": figure_path(s, INTERACTIVITY_FIGURE)},
            "scale": scale_view(scale) if not scale.empty else None, "interactivity": interactivity_table(s),
            "pairs": pair_sections(s), "capacity": capacity_table(result)}


SECTION = KindSection(result=ClosedResult, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="serving", always=True)
