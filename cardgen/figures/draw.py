"""Drawing onto a given ``Axes`` from the plain data of :mod:`cardgen.figures.data`. No file I/O here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from cardgen.figures.data import (
    IngestionPlot,
    InteractivityCurve,
    Line,
    PercentileBars,
    Timeline,
    pair_name,
)


def _finish(ax: Axes, *, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")


def draw_lines(ax: Axes, lines: Sequence[Line], *, xlabel: str, ylabel: str, title: str | None = None) -> None:
    """Each line with markers; its band (when given) shaded."""
    for line in lines:
        (handle,) = ax.plot(line.x, line.y, marker="o", label=line.label)
        if line.low is not None and line.high is not None:
            ax.fill_between(line.x, line.low, line.high, alpha=0.2, color=handle.get_color(), linewidth=0)
    ax.set_ylim(bottom=0)
    _finish(ax, xlabel=xlabel, ylabel=ylabel, title=title)


def draw_ingestion(ax: Axes, plot: IngestionPlot) -> None:
    """The sweep's TTFT against prompt tokens, points dropped by the fit hollow, the fitted line."""
    ax.scatter(plot.prompt_tokens[plot.inlier], plot.ttft_s[plot.inlier], s=14, label="kept by the fit")
    if (~plot.inlier).any():
        ax.scatter(plot.prompt_tokens[~plot.inlier], plot.ttft_s[~plot.inlier], s=14, facecolors="none",
                   edgecolors="tab:red", label="more than 5 % off the fit")
    ax.plot(plot.line_x, plot.line_y, color="black", linewidth=1, label=plot.label)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    _finish(ax, xlabel="prompt tokens", ylabel="time to first token (s)", title="Prompt ingestion")


def draw_timeline(ax_kv: Axes, ax_requests: Axes, tl: Timeline) -> None:
    """KV usage (top) and running / waiting requests (bottom) against time; scenario starts as thin lines."""
    for ax in (ax_kv, ax_requests):
        for start in tl.scenario_starts_s:
            ax.axvline(start, color="lightgray", linewidth=0.6)
    if np.isfinite(tl.kv_usage_pct).any():
        ax_kv.plot(tl.t_s, tl.kv_usage_pct, color="tab:purple", linewidth=1, label="KV cache usage")
        ax_kv.set_ylim(0, 105)
    else:
        ax_kv.text(0.5, 0.5, "the server reports no KV usage", transform=ax_kv.transAxes, ha="center")
    _finish(ax_kv, xlabel="time since the first request (s)", ylabel="KV cache usage (%)",
            title="Server load over the run")
    if np.isfinite(tl.running).any():
        ax_requests.step(tl.t_s, tl.running, where="post", linewidth=1, label="running")
    if np.isfinite(tl.waiting).any():
        ax_requests.step(tl.t_s, tl.waiting, where="post", linewidth=1, label="waiting")
    ax_requests.set_ylim(bottom=0)
    ax_requests.yaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(ax_requests, xlabel="time since the first request (s)", ylabel="requests")


def draw_throughput_latency(ax: Axes, lines: Sequence[Line]) -> None:
    draw_lines(ax, lines, xlabel="throughput (requests/s)", ylabel="median end-to-end latency (s)",
               title="Throughput against latency")
    ax.set_xlim(left=0)


def draw_percentile_bars(ax: Axes, bars: PercentileBars, *, xlabel: str) -> None:
    """Grouped bars of E2E latency p50 / p90 / p95 per load point."""
    x = np.arange(len(bars.labels))
    width = 0.27
    for i, (name, values) in enumerate((("p50", bars.p50), ("p90", bars.p90), ("p95", bars.p95))):
        ax.bar(x + (i - 1) * width, np.nan_to_num(values), width, label=name)
    ax.set_xticks(x, bars.labels)
    _finish(ax, xlabel=xlabel, ylabel="end-to-end latency (s)", title=bars.title)


def _interactivity_panel(ax: Axes, curves: Sequence[InteractivityCurve], *, ttft: bool) -> None:
    for curve in curves:
        x = curve.ttft_s if ttft else curve.tok_s_per_user
        front = curve.front_ttft if ttft else curve.front_user
        (line,) = ax.plot(x, curve.tok_s_per_gpu, marker="o", linewidth=1, label=pair_name(curve.pair))
        on = front & np.isfinite(x)
        order = np.argsort(x[on])
        ax.plot(x[on][order], curve.tok_s_per_gpu[on][order], linestyle="--", linewidth=2.2, alpha=0.5,
                color=line.get_color())
        ax.scatter(x[on], curve.tok_s_per_gpu[on], s=90, facecolors="none", edgecolors=line.get_color(),
                   linewidths=1.6, zorder=3)
        if curve.predicted.any():  # a calibrated run's predicted points: hollow
            ax.scatter(x[curve.predicted], curve.tok_s_per_gpu[curve.predicted], s=36, facecolors="white",
                       edgecolors=line.get_color(), linewidths=1.4, zorder=4)
        for xi, yi, n in zip(x, curve.tok_s_per_gpu, curve.parallel, strict=True):
            if np.isfinite(xi) and np.isfinite(yi):
                ax.annotate(f"{n:.0f}", (xi, yi), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.scatter([], [], s=90, facecolors="none", edgecolors="black", label="Pareto front")
    if any(c.predicted.any() for c in curves):
        ax.scatter([], [], s=36, facecolors="white", edgecolors="black", label="predicted (calibrated)")
    ax.set_ylim(bottom=0)
    _finish(ax, xlabel="median TTFT (s)" if ttft else "tokens/s per user (median decode speed)",
            ylabel="output tokens/s per GPU",
            title="Throughput against TTFT" if ttft else "Throughput against interactivity")


def draw_throughput_interactivity(ax_user: Axes, ax_ttft: Axes, curves: Sequence[InteractivityCurve]) -> None:
    """Output tokens/s per GPU against tokens/s per user (left) and against TTFT (right): a point per parallel
    count (labelled with it), one line per prompt / output pair, the Pareto front circled and dashed."""
    _interactivity_panel(ax_user, curves, ttft=False)
    _interactivity_panel(ax_ttft, curves, ttft=True)
