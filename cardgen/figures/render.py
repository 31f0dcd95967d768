"""Laying out and writing the figures: deterministic PNGs (Agg, fixed style and dpi, no dates or versions in
the metadata), so the same analysis gives the same bytes."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from cardgen.analysis.analyse import Analysis
from cardgen.figures import data
from cardgen.figures.draw import (
    draw_ingestion,
    draw_percentile_bars,
    draw_throughput_interactivity,
    draw_throughput_latency,
    draw_timeline,
)
from cardgen.figures.kindparts import kind_figures, new_figure
from cardgen.figures.names import FIGURE_NAMES, replay_figure_name
from cardgen.figures.replay import ReplayTimeline, draw_replay, replay_timeline
from cardgen.figures.timebudget import budget_bars, draw_budget
from cardgen.forked import forked_map
from cardgen.rundir import FIGURES_DIR

DPI = 100
STYLE: dict[RcKeyType, Any] = {
    "svg.hashsalt": "cardgen",
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "path.simplify": True,
}
def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})


_figure = new_figure


def build_figures(analysis: Analysis) -> dict[str, Callable[[], Figure]]:
    """File name -> a function drawing that figure, for every figure the analysis has data for."""
    s = analysis.summary
    out: dict[str, Callable[[], Figure]] = {}
    if analysis.ingestion is not None and analysis.ingestion.fit.tok_s:
        plot = data.ingestion(analysis.ingestion)

        def ingestion() -> Figure:
            fig, (ax,) = _figure(8, 4.5)
            draw_ingestion(ax, plot)
            return fig
        out[FIGURE_NAMES["ingestion"]] = ingestion
    tl = data.timeline(analysis.timeseries, s.scenarios)
    if tl is not None:
        def timeline() -> Figure:
            fig, (ax1, ax2) = _figure(10, 6, 2, 1, sharex=True)
            draw_timeline(ax1, ax2, tl)
            return fig
        out[FIGURE_NAMES["timeline"]] = timeline
    tput = data.throughput_latency(s.scenarios)
    if tput:
        def throughput_latency() -> Figure:
            fig, (ax,) = _figure(8, 4.5)
            draw_throughput_latency(ax, tput)
            return fig
        out[FIGURE_NAMES["throughput_latency"]] = throughput_latency
    curves = data.throughput_interactivity(s.scenarios, gpus=s.gpu_count)
    if curves:
        def interactivity() -> Figure:
            fig, (ax1, ax2) = _figure(11, 4.5, 1, 2, sharey=True)
            draw_throughput_interactivity(ax1, ax2, curves)
            return fig
        out[FIGURE_NAMES["throughput_interactivity"]] = interactivity
    bars = data.latency_percentiles(s.scenarios)
    if bars:
        def percentiles() -> Figure:
            cols = min(len(bars), 3)
            rows = math.ceil(len(bars) / cols)
            fig, axes = _figure(4 * cols, 3.5 * rows, rows, cols)
            for ax, group in zip(axes, bars, strict=False):
                draw_percentile_bars(ax, group, xlabel=group.xlabel)
            for ax in axes[len(bars):]:
                ax.set_visible(False)
            return fig
        out[FIGURE_NAMES["latency_percentiles"]] = percentiles
    budget = budget_bars(s.time_budget.points)
    if budget is not None:
        def time_budget() -> Figure:
            fig, (ax,) = _figure(9, 1.6 + 0.45 * len(budget.labels))
            draw_budget(ax, budget)
            return fig
        out[FIGURE_NAMES["time_budget"]] = time_budget
    for result in s.replays:
        replayed = replay_timeline(result)
        if replayed is not None:
            def replay(tl: ReplayTimeline | None = replayed) -> Figure:
                assert tl is not None  # bound while narrowed (mypy does not narrow a default)
                fig, axes = _figure(10, 9, 4, 1, sharex=True)
                draw_replay(axes, tl)
                return fig
            out[replay_figure_name(result.scenario)] = replay
    out.update(kind_figures(s))
    return out


def write_figures(analysis: Analysis, run_dir: Path, *, processes: int | None = None,
                  meanwhile: Callable[[], object] | None = None) -> list[str]:
    """Draw every figure into ``run_dir/figures/``; returns the paths relative to ``run_dir``, in drawing order.

    Each PNG is drawn to a temporary name and moved over the old one in one step, and the PNGs this analysis no
    longer draws are removed only once every new one is written: a drawing that fails leaves the previous
    figures as they were, never a card whose images are gone. The figures are drawn by ``processes`` forked
    processes at once (default: one per core this process may use; each PNG's bytes are the same however many
    draw them); ``meanwhile()`` runs here while they draw (after them when this process draws them)."""
    out_dir = Path(run_dir) / FIGURES_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(STYLE)
        makers = build_figures(analysis)
        jobs = [(make, out_dir / f"{name}.tmp") for name, make in makers.items()]
        try:
            _draw_all(jobs, processes, meanwhile)
            for name in makers:
                os.replace(out_dir / f"{name}.tmp", out_dir / name)
                written.append(f"{FIGURES_DIR}/{name}")
        finally:
            for _, tmp in jobs:
                tmp.unlink(missing_ok=True)
    drawn = {Path(w).name for w in written}
    for old in out_dir.glob("*.png"):
        if old.name not in drawn:
            old.unlink()
    return written


#: the figures the forked processes draw (set before they fork: a drawing function is not picklable)
_JOBS: list[tuple[Callable[[], Figure], Path]] = []


def _draw_job(i: int) -> None:
    make, path = _JOBS[i]
    _save(make(), path)


def _draw_all(jobs: list[tuple[Callable[[], Figure], Path]], processes: int | None,
              meanwhile: Callable[[], object] | None) -> None:
    """Draw each job's figure to its path on ``processes`` forked processes (:func:`cardgen.forked.forked_map`),
    running ``meanwhile()`` as they draw."""
    _JOBS[:] = jobs
    try:
        forked_map(_draw_job, range(len(jobs)), workers=processes, meanwhile=meanwhile)
    finally:
        _JOBS.clear()
