"""Charts for the site as inline SVG: pure functions from numbers to markup, no plotting library, nothing loaded
from elsewhere (the site works offline), drawn in microseconds (a site of a thousand runs draws thousands).

Every piece of text is HTML-escaped here; the page's raw HTML then passes :mod:`cardgen.site.sanitize`, whose
allowlist holds these SVG elements and attributes. Colours come from :data:`PALETTE` only. Each marker carries
its exact values (``data-x``, ``data-y``, ``data-label``) and its series' name (``data-series`` on its group), so
the page can offer the chart's data as CSV (``site_src/assets/csv.js``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from cardgen import numbers

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str = ""  # written next to the marker (a parallel count)
    title: str = ""  # the tooltip
    strong: bool = False  # circled (on a Pareto front)
    href: str = ""  # where a click on the marker goes
    key: str = ""  # ``data-key`` of the marker (the leaderboard hides the markers of filtered-out rows)
    hollow: bool = False  # a hollow marker in any series (a calibrated run's predicted point)


@dataclass(frozen=True)
class Series:
    name: str
    points: list[Point]
    color: str
    hollow: bool = False  # hollow markers and a dashed line (modelled figures)
    line: bool = True  # join the points
    legend: bool = True


@dataclass(frozen=True)
class Chart:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    x_from_zero: bool = False
    y_from_zero: bool = True
    notes: list[str] = field(default_factory=list)  # lines under the chart


def nice_ticks(low: float, high: float, *, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) covering ``[low, high]``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(low / step + 1e-9) * step
    ticks, t = [], start
    while t < high + step * 0.999:
        ticks.append(round(t, 12))
        t += step
    return ticks


_W, _H = 640, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 34, 48


def _finite(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if math.isfinite(p.x) and math.isfinite(p.y)]


def chart_svg(chart: Chart) -> str:
    """The chart as one line of HTML: a ``<div class="cardgen-chart">`` holding the SVG and its legend."""
    pts = [p for s in chart.series for p in _finite(s.points)]
    if not pts:
        return ""
    xs, ys = [p.x for p in pts], [p.y for p in pts]
    xt = nice_ticks(0.0 if chart.x_from_zero else min(xs), max(xs))
    yt = nice_ticks(0.0 if chart.y_from_zero else min(ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def sx(x: float) -> float:
        return round(_LEFT + (x - x0) / (x1 - x0) * pw, 1)

    def sy(y: float) -> float:
        return round(_TOP + ph - (y - y0) / (y1 - y0) * ph, 1)

    out = [f'<svg class="cardgen-svg" viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(chart.title)}">',
           f"<title>{escape(chart.title)}</title>",
           f'<text x="{_W / 2}" y="20" text-anchor="middle" class="cardgen-svg-title">{escape(chart.title)}</text>']
    for t in xt:
        out.append(f'<line x1="{sx(t)}" y1="{_TOP}" x2="{sx(t)}" y2="{_TOP + ph}" class="cardgen-grid"/>'
                   f'<text x="{sx(t)}" y="{_TOP + ph + 16}" text-anchor="middle">{numbers.tick(t)}</text>')
    for t in yt:
        out.append(f'<line x1="{_LEFT}" y1="{sy(t)}" x2="{_LEFT + pw}" y2="{sy(t)}" class="cardgen-grid"/>'
                   f'<text x="{_LEFT - 6}" y="{sy(t) + 4}" text-anchor="end">{numbers.tick(t)}</text>')
    out.append(f'<rect x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" class="cardgen-frame"/>')
    out.append(f'<text x="{_LEFT + pw / 2}" y="{_H - 8}" text-anchor="middle">{escape(chart.xlabel)}</text>')
    out.append(f'<text x="14" y="{_TOP + ph / 2}" text-anchor="middle" transform="rotate(-90 14 {_TOP + ph / 2})">'
               f"{escape(chart.ylabel)}</text>")
    for s in chart.series:
        spts = _finite(s.points)
        if not spts:
            continue
        group = [f'<g class="cardgen-series" stroke="{s.color}" fill="{s.color}" data-series="{escape(s.name)}">']
        if s.line and len(spts) > 1:
            dash = ' stroke-dasharray="5 4"' if s.hollow else ""
            coords = " ".join(f"{sx(p.x)},{sy(p.y)}" for p in spts)
            group.append(f'<polyline points="{coords}" fill="none" stroke-width="1.8"{dash}/>')
        for p in spts:
            fill = ' fill="#ffffff"' if s.hollow or p.hollow else ""
            key = f' data-key="{escape(p.key)}"' if p.key else ""
            key += f' data-x="{p.x!r}" data-y="{p.y!r}"' + (f' data-label="{escape(p.label)}"' if p.label else "")
            tip = f"<title>{escape(p.title or s.name)}</title>"
            marker = f'<circle cx="{sx(p.x)}" cy="{sy(p.y)}" r="4" stroke-width="1.5"{fill}{key}>{tip}</circle>'
            if p.strong:
                marker += f'<circle cx="{sx(p.x)}" cy="{sy(p.y)}" r="8" fill="none" stroke-width="1.2"/>'
            if p.label:
                marker += (f'<text x="{sx(p.x) + 7}" y="{sy(p.y) - 6}" stroke="none" class="cardgen-svg-label">'
                           f"{escape(p.label)}</text>")
            group.append(f'<a href="{escape(p.href)}">{marker}</a>' if p.href else marker)
        group.append("</g>")
        out.append("".join(group))
    out.append("</svg>")
    legend = [s for s in chart.series if s.legend and _finite(s.points)]
    items = "".join(
        f'<span class="cardgen-legend-item"><svg width="22" height="12" viewBox="0 0 22 12">'
        f'<line x1="1" y1="6" x2="21" y2="6" stroke="{s.color}" stroke-width="2"'
        + (' stroke-dasharray="4 3"' if s.hollow else "") + "/>"
        f'<circle cx="11" cy="6" r="3.5" stroke="{s.color}" fill="{"#ffffff" if s.hollow else s.color}"/></svg> '
        f"{escape(s.name)}</span>"
        for s in legend)
    notes = "".join(f'<span class="cardgen-chart-note">{escape(n)}</span>' for n in chart.notes)
    return (f'<div class="cardgen-chart">{"".join(out)}'
            + (f'<div class="cardgen-legend">{items}</div>' if items else "")
            + (f'<div class="cardgen-chart-notes">{notes}</div>' if notes else "") + "</div>")
