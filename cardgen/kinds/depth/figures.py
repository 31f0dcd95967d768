"""Speed at context depth drawn, the kind's figure (:data:`FIGURES`; data, then drawing onto given Axes): ingestion
and decode speed against depth, medians with their 95 % intervals, and the engine's own account beside them where
it gives one."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cardgen.figures.kindparts import KindFigures, new_figure
from cardgen.kinds.depth.analysis import FIGURE, DepthSpeeds
from cardgen.schemas.summary import Distribution, Summary


@dataclass(frozen=True)
class DepthCurve:
    """One speed over the depths (NaN where a depth has none)."""

    label: str  # Ingestion at depth
    median: np.ndarray
    low: np.ndarray
    high: np.ndarray
    engine: np.ndarray  # the engine's own figure


@dataclass(frozen=True)
class DepthPlot:
    depths: np.ndarray
    curves: tuple[DepthCurve, DepthCurve]


def _num(x: float | None) -> float:
    return math.nan if x is None or not math.isfinite(x) else float(x)


def depth_plot(result: DepthSpeeds) -> DepthPlot | None:
    """The figure's data: the depths that sent requests (None: fewer than one)."""
    ran = sorted((p for p in result.points if p.not_run is None and p.requests), key=lambda p: p.depth)
    if not ran:
        return None

    def curve(label: str, ds: list[Distribution], engine: list[float | None]) -> DepthCurve:
        return DepthCurve(label=label, median=np.array([_num(d.p50) for d in ds]),
                          low=np.array([_num(d.p50_ci_low) for d in ds]),
                          high=np.array([_num(d.p50_ci_high) for d in ds]), engine=np.array([_num(e) for e in engine]))

    return DepthPlot(depths=np.array([p.depth for p in ran], dtype=float), curves=(
        curve("Ingestion at depth (new tokens / TTFT)", [p.ingest_tok_s for p in ran],
              [p.engine_ingest_tok_s for p in ran]),
        curve("Decode at depth (1 / TPOT)", [p.decode_tok_s for p in ran], [p.engine_decode_tok_s for p in ran])))


def draw_depth(axes: Sequence[Axes], plot: DepthPlot) -> None:
    """One panel per speed, sharing the depth axis."""
    for ax, c in zip(axes, plot.curves, strict=False):
        finite = np.isfinite(c.median)
        ax.plot(plot.depths[finite], c.median[finite], marker="o", color="tab:blue", label="client, median")
        both = finite & np.isfinite(c.low) & np.isfinite(c.high)
        ax.vlines(plot.depths[both], c.low[both], c.high[both], color="tab:blue", alpha=0.5, linewidth=3,
                  label="95 % interval")
        engine = np.isfinite(c.engine)
        if engine.any():
            ax.plot(plot.depths[engine], c.engine[engine], marker="s", linestyle="--", color="tab:orange",
                    label="engine's own account")
        ax.set_ylabel(f"{c.label.split(' (')[0]} (tok/s)")
        ax.set_title(c.label, fontsize="medium")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", fontsize="small")
    if axes:
        axes[-1].set_xlabel("context depth (tokens the server holds before the request)")


def depth_figures(result: DepthSpeeds, s: Summary) -> dict[str, Callable[[], Figure]]:
    """The figure, where a depth sent requests."""
    plot = depth_plot(result)
    if plot is None:
        return {}

    def draw() -> Figure:
        fig, axes = new_figure(8, 6, 2, 1, sharex=True)
        draw_depth(axes, plot)
        return fig
    return {FIGURE: draw}


FIGURES = KindFigures(result=DepthSpeeds, build=depth_figures)
