"""An SLO search drawn, the kind's figures (:data:`FIGURES`: one per search; data, then drawing onto given Axes):
each target's percentile against load, with its 95 % interval at every probe and its threshold, each probe marked
by its verdict, the answer's bracket shaded and the limit's estimate drawn where the percentile crosses the
threshold."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cardgen.figures.kindparts import KindFigures, new_figure
from cardgen.kinds.slosearch.analysis import SloSearches, SloSearchResult, figure_name
from cardgen.schemas.summary import Summary

VERDICT_STYLE = {"met": ("o", "tab:green"), "missed": ("X", "tab:red"), "could not tell": ("s", "tab:gray")}


@dataclass(frozen=True)
class SloCurve:
    """One target over the probes, sorted by load (NaN where a probe has no such bound)."""

    label: str  # TPOT p99
    threshold_s: float
    load: np.ndarray
    value_s: np.ndarray
    low_s: np.ndarray  # the 95 % interval
    high_s: np.ndarray
    verdicts: tuple[str, ...]  # met | missed | could not tell, per probe


@dataclass(frozen=True)
class SloPlot:
    title: str
    unit: str
    curves: tuple[SloCurve, ...]
    low: float | None
    high: float | None
    crossing: float | None
    flat: tuple[float, float] | None


def _num(x: float | None) -> float:
    return math.nan if x is None or not math.isfinite(x) else float(x)


def slo_plot(r: SloSearchResult) -> SloPlot | None:
    """The figure's data (None for a search without probes)."""
    if not r.probes:
        return None
    probes = sorted(r.probes, key=lambda p: p.load)
    verdicts = tuple("met" if p.met is True else "missed" if p.met is False else "could not tell" for p in probes)
    curves = []
    for i, first in enumerate(probes[0].percentiles):
        cells = [p.percentiles[i] if i < len(p.percentiles) else None for p in probes]
        curves.append(SloCurve(
            label=f"{first.metric.upper()} p{first.percentile:g}", threshold_s=first.threshold_s,
            load=np.array([p.load for p in probes], dtype=float),
            value_s=np.array([_num(c.value_s if c else None) for c in cells]),
            low_s=np.array([_num(c.ci_low_s if c else None) for c in cells]),
            high_s=np.array([_num(c.ci_high_s if c else None) for c in cells]), verdicts=verdicts))
    what = "rate" if r.load == "rate" else "concurrency"
    return SloPlot(title=f"{r.scenario}: highest {what} within {r.slo_text}", unit=r.unit, curves=tuple(curves),
                   low=r.low, high=r.high, crossing=r.crossing,
                   flat=(r.flat[0], r.flat[1]) if r.flat and len(r.flat) == 2 else None)


def draw_slo(axes: Sequence[Axes], plot: SloPlot) -> None:
    """One panel per target, sharing the load axis."""
    for ax, c in zip(axes, plot.curves, strict=False):
        scale, unit = (1000.0, "ms") if c.threshold_s < 1 else (1.0, "s")
        value, low, high = c.value_s * scale, c.low_s * scale, c.high_s * scale
        finite = np.isfinite(value)
        ax.plot(c.load[finite], value[finite], color="tab:blue", linewidth=1, zorder=2)
        both = np.isfinite(low) & np.isfinite(high) & finite
        ax.vlines(c.load[both], low[both], high[both], color="tab:blue", alpha=0.5, linewidth=3,
                  label="95 % interval", zorder=1)
        for verdict, (marker, color) in VERDICT_STYLE.items():
            pick = finite & np.array([v == verdict for v in c.verdicts])
            if pick.any():
                ax.scatter(c.load[pick], value[pick], marker=marker, color=color, s=36, zorder=3,
                           label=f"probe: {verdict}")
        ax.axhline(c.threshold_s * scale, color="tab:red", linestyle="--", linewidth=1,
                   label=f"threshold {c.threshold_s * scale:g} {unit}")
        if plot.low is not None and plot.high is not None:
            ax.axvspan(plot.low, plot.high, color="tab:orange", alpha=0.15, label="answer: the bracket")
        if plot.flat is not None:
            ax.axvspan(plot.flat[0], plot.flat[1], color="tab:gray", alpha=0.15, hatch="//", label="flat boundary")
        if plot.crossing is not None:
            ax.axvline(plot.crossing, color="tab:orange", linewidth=1, label="crossing (estimate)")
        ax.set_xscale("log")
        ax.set_ylabel(f"{c.label} ({unit})")
        ax.legend(loc="upper left", fontsize="small")
    if axes:
        axes[0].set_title(plot.title)
        axes[min(len(axes), len(plot.curves)) - 1].set_xlabel(f"load ({plot.unit}, log scale)")


def _drawer(plot: SloPlot) -> Callable[[], Figure]:
    def draw() -> Figure:
        fig, axes = new_figure(8, 3.2 * len(plot.curves), len(plot.curves), 1, sharex=True)
        draw_slo(axes, plot)
        return fig
    return draw


def slo_figures(result: SloSearches, s: Summary) -> dict[str, Callable[[], Figure]]:
    """A figure per search that has probes, by file name."""
    out = {}
    for search in result.searches:
        plot = slo_plot(search)
        if plot is not None:
            out[figure_name(search.scenario)] = _drawer(plot)
    return out


FIGURES = KindFigures(result=SloSearches, build=slo_figures)
