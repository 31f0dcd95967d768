"""The leaderboard's trade-off chart and cost column: what each run's closed-loop points deliver against what each
user gets, on axes the reader switches, as InferenceX charts throughput per GPU against interactivity with cost
on the axis.

Up: output tokens/s per GPU, $ / million tokens (the run's price per GPU-hour, run.json ``price``) or joules per
output token (where the GPUs' energy was measured). Across: tokens/s per user (median decode speed) or median
TTFT. A line per run and prompt / output pair, a point per parallel count; a colour per GPU, modelled runs hollow and dashed. Every pair
of axes is drawn (inline SVG, :mod:`cardgen.site.charts`); the page shows the one chosen, and keeps the choice in
its address with the filters (``site_src/assets/leaderboard.js``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from cardgen import numbers
from cardgen.analysis.analyse import HEADLINE_POINT
from cardgen.kinds import GENERATION, gives
from cardgen.schemas.summary import ScenarioSummary, Summary
from cardgen.site import charts
from cardgen.site.plan import PlannedRun, href


@dataclass(frozen=True)
class Axis:
    key: str  # in the address: x=user, y=usd
    title: str
    value: Callable[[ScenarioSummary, int], float | None]
    empty: str = ""  # why a run may have none of it
    show: Callable[[float | None], str] = numbers.sig


X_AXES = (
    Axis("user", "Tokens/s per user (median decode speed)", lambda s, _: s.decode_tok_s.p50),
    Axis("ttft", "Median TTFT (s)", lambda s, _: s.ttft_s.p50, show=numbers.latency),
)
Y_AXES = (
    Axis("tput", "Output tokens/s per GPU", lambda s, gpus: s.output_tok_s / gpus if s.output_tok_s else None),
    Axis("usd", "$ / million tokens (prompt + output)", lambda s, _: s.usd_per_million_tokens,
         empty="No run shown has a price: give one with cardgen build or cardgen render --price-per-hour P.",
         show=numbers.usd),
    Axis("jpt", "Joules per output token", lambda s, _: s.j_per_output_token,
         empty="No run shown measured its GPUs' energy (NVML or DCGM)."),
)
DEFAULT = ("user", "tput")
COST_COLUMN = f"$ / M tokens @{HEADLINE_POINT['parallel']} parallel"


def headline_cost(s: Summary) -> float | None:
    """The cost per million tokens (prompt + output) at the card's headline point, when the run has a price."""
    point = next((x for x in s.scenarios if gives(x, GENERATION) and x.parallel == HEADLINE_POINT["parallel"]
                  and x.prompt_tokens == HEADLINE_POINT["prompt_tokens"]
                  and x.output_tokens == HEADLINE_POINT["output_tokens"]), None)
    return point.usd_per_million_tokens if point is not None else None


def _lines(r: PlannedRun, x: Axis, y: Axis, *, here: str, key: str) -> list[list[charts.Point]]:
    """A run's closed-loop points with both figures, a line per prompt / output pair, by parallel count."""
    s = r.run.summary
    gpus = s.gpu_count or 1
    pairs: dict[tuple[int, int], list[charts.Point]] = {}
    for p in sorted((p for p in s.scenarios if gives(p, GENERATION) and p.requests > p.failed),
                    key=lambda p: (p.prompt_tokens, p.output_tokens, p.parallel or 0)):
        xv, yv = x.value(p, gpus), y.value(p, gpus)
        if xv is None or yv is None:
            continue
        pairs.setdefault((p.prompt_tokens, p.output_tokens), []).append(charts.Point(
            xv, yv, label=str(p.parallel), key=key, href=href(here, r.page_dir),
            title=f"{r.model} on {r.gpu}, {p.scenario}: {x.show(xv)} {x.title.lower()}, {y.show(yv)} "
                  f"{y.title.lower()}"))
    return list(pairs.values())


def _view(runs: Sequence[PlannedRun], x: Axis, y: Axis, *, here: str, keys: Callable[[PlannedRun], str]) -> str:
    gpus = sorted({r.gpu for r in runs})
    seen: set[tuple[str, bool]] = set()
    series = []
    for r in sorted(runs, key=lambda r: (r.gpu, r.model, r.run.sort_key)):
        modelled = r.run.summary.modelled
        for points in _lines(r, x, y, here=here, key=keys(r)):
            legend = (r.gpu, modelled) not in seen
            seen.add((r.gpu, modelled))
            series.append(charts.Series(f"{r.gpu} ({'modelled' if modelled else 'measured'})", points,
                                        charts.color(gpus.index(r.gpu)), hollow=modelled, legend=legend))
    chart = charts.chart_svg(charts.Chart(
        title=f"{y.title} against {x.title[0].lower()}{x.title[1:]}", xlabel=x.title, ylabel=y.title,
        series=series, x_from_zero=True,
        notes=["A line per run and prompt / output pair, a point per parallel count (the label); hollow and "
               "dashed: modelled. Click a point for its run."]))
    return chart or f'<p class="cardgen-chart-empty">{escape(y.empty or "No run shown has these figures.")}</p>'


def tradeoff_chart(runs: Sequence[PlannedRun], *, here: str, keys: Callable[[PlannedRun], str]) -> str:
    """The chart with its two axis choosers, every pair of axes drawn, the default one shown (raw HTML)."""

    def chooser(css: str, label: str, axes: Sequence[Axis], chosen: str) -> str:
        options = "".join(f'<option value="{a.key}"{" selected" if a.key == chosen else ""}>{escape(a.title)}'
                          "</option>" for a in axes)
        return f'<label>{label} <select class="{css}" aria-label="{label} axis">{options}</select></label>'

    views = "".join(
        f'<div class="cardgen-tradeoff-view" data-x="{x.key}" data-y="{y.key}"'
        + ("" if (x.key, y.key) == DEFAULT else " hidden") + f">{_view(runs, x, y, here=here, keys=keys)}</div>"
        for y in Y_AXES for x in X_AXES)
    return ('<div class="cardgen-tradeoff"><div class="cardgen-filters cardgen-axes">'
            + chooser("cardgen-axis-y", "Up", Y_AXES, DEFAULT[1]) + " "
            + chooser("cardgen-axis-x", "Across", X_AXES, DEFAULT[0]) + "</div>" + views + "</div>")
