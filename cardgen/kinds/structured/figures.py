"""Constrained decoding drawn, the kind's figure (:data:`FIGURES`): per schema, the median TTFT and TPOT of each
arm with their 95 % intervals against the parallel count (data, then drawing onto given Axes)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cardgen.figures.kindparts import KindFigures, new_figure
from cardgen.kinds.structured.analysis import FIGURE, StructuredOutputs
from cardgen.kinds.structured.program import ARMS
from cardgen.schemas.summary import Summary

STYLE = {"constrained": ("o", "tab:red"), "free": ("s", "tab:blue")}
METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))


@dataclass(frozen=True)
class Series:
    """One schema's arm of one metric against parallel (ms; NaN where a point has no value)."""

    label: str
    arm: str
    parallel: tuple[int, ...]
    median_ms: tuple[float, ...]
    low_ms: tuple[float, ...]
    high_ms: tuple[float, ...]


def _ms(x: float | None) -> float:
    return math.nan if x is None or not math.isfinite(x) else 1000.0 * x


def series(result: StructuredOutputs, metric: str) -> list[Series]:
    """Every (schema, arm) of ``metric`` (``ttft_s`` or ``tpot_s``), points sorted by parallel count."""
    out = []
    for schema in dict.fromkeys(p.schema_name for p in result.points):
        points = sorted((p for p in result.points if p.schema_name == schema), key=lambda p: p.parallel)
        for arm in ARMS:
            ds = [next(getattr(a, metric) for a in p.arms if a.arm == arm) for p in points]
            out.append(Series(label=f"{schema}, {arm}", arm=arm, parallel=tuple(p.parallel for p in points),
                              median_ms=tuple(_ms(d.p50) for d in ds), low_ms=tuple(_ms(d.p50_ci_low) for d in ds),
                              high_ms=tuple(_ms(d.p50_ci_high) for d in ds)))
    return out


def draw(ax: Axes, lines: list[Series], title: str) -> None:
    for s in lines:
        marker, color = STYLE.get(s.arm, ("^", "tab:gray"))
        low = [m - lo if math.isfinite(lo) else 0.0 for m, lo in zip(s.median_ms, s.low_ms, strict=True)]
        high = [hi - m if math.isfinite(hi) else 0.0 for m, hi in zip(s.median_ms, s.high_ms, strict=True)]
        ax.errorbar(s.parallel, s.median_ms, yerr=[low, high], marker=marker, color=color, capsize=3,
                    linestyle="-" if s.arm == "constrained" else "--", label=s.label)
    ax.set_xlabel("parallel requests")
    ax.set_ylabel(f"{title} median (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def structured_figures(result: StructuredOutputs, s: Summary) -> dict[str, Callable[[], Figure]]:
    """The figure, where any point has a successful request."""
    if not any(a.ttft_s.n for p in result.points for a in p.arms):
        return {}

    def make() -> Figure:
        fig, axes = new_figure(9.0, 3.6, 1, 2)
        for ax, (metric, title) in zip(axes, METRICS, strict=True):
            draw(ax, series(result, metric), title)
        return fig

    return {FIGURE: make}


FIGURES = KindFigures(result=StructuredOutputs, build=structured_figures)
