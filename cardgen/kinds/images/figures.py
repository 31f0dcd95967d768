"""Image requests drawn, the kind's figure (:data:`FIGURES`, ``images.png``): TTFT (median, 95 % interval) and the
image tokens the server counted against the image side, a line per image count, at the smallest parallel count;
and the throughput against the parallel count, a line per (count, side), where the run has more than one count
(data, then drawing onto given Axes)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cardgen.figures.kindparts import KindFigures, new_figure
from cardgen.kinds.images.analysis import FIGURE, ImageRequests, ImagesPoint
from cardgen.schemas.summary import Summary


@dataclass(frozen=True)
class Line:
    """One line of a panel: its label, x values and y values (NaN where a point has none), and the y interval's
    ends (NaN where none)."""

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()


def _num(x: float | None, scale: float = 1.0) -> float:
    return math.nan if x is None or not math.isfinite(x) else scale * x


def _measured(result: ImageRequests) -> list[ImagesPoint]:
    return [p for p in result.points if p.images and p.not_run is None and p.ttft_s.n]


def by_side(result: ImageRequests, metric: str) -> list[Line]:
    """``ttft`` (ms, with intervals) or ``tokens`` (image tokens per request) against the side, a line per image
    count, at the smallest parallel count of the run's image points."""
    points = _measured(result)
    if not points:
        return []
    least = min(p.parallel for p in points)
    out = []
    for k in sorted({p.images for p in points}):
        row = sorted((p for p in points if p.images == k and p.parallel == least), key=lambda p: p.side)
        if metric == "ttft":
            out.append(Line(f"{k} image{'s' if k > 1 else ''}", tuple(float(p.side) for p in row),
                            tuple(_num(p.ttft_s.p50, 1000) for p in row),
                            tuple(_num(p.ttft_s.p50_ci_low, 1000) for p in row),
                            tuple(_num(p.ttft_s.p50_ci_high, 1000) for p in row)))
        else:
            out.append(Line(f"{k} image{'s' if k > 1 else ''}", tuple(float(p.side) for p in row),
                            tuple(_num(p.image_tokens) for p in row)))
    return out


def by_parallel(result: ImageRequests) -> list[Line]:
    """Throughput (output tok/s) against the parallel count, a line per (image count, side); none where the run
    has one parallel count."""
    points = [p for p in result.points if p.not_run is None and p.throughput_tok_s is not None]
    if len({p.parallel for p in points}) < 2:
        return []
    out = []
    for k, side in sorted({(p.images, p.side) for p in points}):
        row = sorted((p for p in points if (p.images, p.side) == (k, side)), key=lambda p: p.parallel)
        out.append(Line(f"{k} x {side} px" if k else "text only", tuple(float(p.parallel) for p in row),
                        tuple(_num(p.throughput_tok_s) for p in row)))
    return out


def draw(ax: Axes, lines: list[Line], *, xlabel: str, ylabel: str, title: str) -> None:
    for line in lines:
        if line.low:
            low = [y - lo if math.isfinite(lo) else 0.0 for y, lo in zip(line.y, line.low, strict=True)]
            high = [hi - y if math.isfinite(hi) else 0.0 for y, hi in zip(line.y, line.high, strict=True)]
            ax.errorbar(line.x, line.y, yerr=[low, high], marker="o", capsize=3, label=line.label)
        else:
            ax.plot(line.x, line.y, marker="o", label=line.label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def images_figures(result: ImageRequests, s: Summary) -> dict[str, Callable[[], Figure]]:
    """The figure, where an image point has a successful request."""
    ttft, tokens, throughput = by_side(result, "ttft"), by_side(result, "tokens"), by_parallel(result)
    if not ttft:
        return {}

    def make() -> Figure:
        panels = 3 if throughput else 2
        fig, axes = new_figure(4.2 * panels, 3.6, 1, panels)
        draw(axes[0], ttft, xlabel="image side (px)", ylabel="TTFT median (ms)", title="TTFT")
        draw(axes[1], tokens, xlabel="image side (px)", ylabel="image tokens per request",
             title="Image tokens (server's count)")
        if throughput:
            draw(axes[2], throughput, xlabel="parallel requests", ylabel="output tok/s", title="Throughput")
        return fig

    return {FIGURE: make}


FIGURES = KindFigures(result=ImageRequests, build=images_figures)
