"""The closed loop's figures (:data:`FIGURES`): the total output throughput against parallel requests, a line per
prompt / output pair (``total_throughput.png``), and per pair the speed from start and TTFT per request against
parallel requests, median and p25-p75, with the server's largest KV usage (``speed_ttft_<pair>.png``). Throughput
against interactivity is every sweep over users' (:mod:`cardgen.figures.render`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cardgen.figures.data import Line, pair_name
from cardgen.figures.draw import draw_lines
from cardgen.figures.kindparts import KindFigures, new_figure
from cardgen.kinds.closed import CLOSED
from cardgen.kinds.closed.analysis import ClosedResult
from cardgen.schemas.summary import ScenarioSummary, Summary
from cardgen.sweeps import sweep_pairs

TOTAL_THROUGHPUT = "total_throughput.png"
PAIR_FIGURE = "speed_ttft_{pair}.png"  # one per (prompt, output) pair
KV_COLOR = "tab:gray"


def pair_figure_name(pair: tuple[int, int]) -> str:
    return PAIR_FIGURE.format(pair=f"in{pair[0]}-out{pair[1]}")  # the pair's name in file names (in1024-out128)


def _arr(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def total_throughput(scenarios: Sequence[ScenarioSummary]) -> list[Line]:
    """Total output throughput (tok/s) against parallel requests, one line per (prompt, output) pair."""
    return [Line(pair_name(pair), _arr([s.parallel for s in pts]), _arr([s.output_tok_s for s in pts]))
            for pair, pts in sweep_pairs(scenarios, CLOSED.name).items()]


@dataclass(frozen=True)
class PairPanels:
    """Per pair: per-request speed from start and TTFT against parallel requests (median, p25-p75), and the
    largest KV usage (percent) the server reported at each point."""

    pair: tuple[int, int]
    parallel: np.ndarray
    speed: Line
    ttft: Line
    kv_usage_pct: np.ndarray


def pair_panels(scenarios: Sequence[ScenarioSummary]) -> list[PairPanels]:
    out = []
    for pair, pts in sweep_pairs(scenarios, CLOSED.name).items():
        x = _arr([s.parallel for s in pts])
        sp = [s.speed_from_start_tok_s for s in pts]
        tt = [s.ttft_s for s in pts]
        out.append(PairPanels(
            pair=pair, parallel=x,
            speed=Line("speed from start", x, _arr([d.p50 for d in sp]), _arr([d.p25 for d in sp]),
                       _arr([d.p75 for d in sp])),
            ttft=Line("TTFT", x, _arr([d.p50 for d in tt]), _arr([d.p25 for d in tt]), _arr([d.p75 for d in tt])),
            kv_usage_pct=_arr([None if s.kv_usage_max is None else 100 * s.kv_usage_max for s in pts]),
        ))
    return out


def draw_total_throughput(ax: Axes, lines: Sequence[Line]) -> None:
    draw_lines(ax, lines, xlabel="parallel requests", ylabel="total output throughput (tokens/s)",
               title="Total generation speed")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _kv_twin(ax: Axes, x: np.ndarray, kv_pct: np.ndarray) -> None:
    if not np.isfinite(kv_pct).any():
        return
    twin = ax.twinx()
    twin.plot(x, kv_pct, linestyle="--", marker=".", color=KV_COLOR, label="max KV usage")
    twin.set_ylabel("max KV cache usage (%)", color=KV_COLOR)
    twin.set_ylim(0, 105)
    twin.tick_params(axis="y", colors=KV_COLOR)


def draw_pair(ax_speed: Axes, ax_ttft: Axes, panel: PairPanels) -> None:
    """Speed from start per request (top) and TTFT (bottom) against parallel requests: median line, p25-p75
    band, the server's largest KV usage on a second axis."""
    draw_lines(ax_speed, [panel.speed], xlabel="parallel requests", ylabel="speed per request (tokens/s)",
               title=f"{panel.pair[0]} prompt tokens, {panel.pair[1]} output tokens: median, p25-p75")
    _kv_twin(ax_speed, panel.parallel, panel.kv_usage_pct)
    draw_lines(ax_ttft, [panel.ttft], xlabel="parallel requests", ylabel="time to first token (s)")
    _kv_twin(ax_ttft, panel.parallel, panel.kv_usage_pct)
    for ax in (ax_speed, ax_ttft):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def closed_figures(result: ClosedResult, s: Summary) -> dict[str, Callable[[], Figure]]:
    """The total throughput figure and a figure per prompt / output pair, for the run's closed-loop points."""
    out: dict[str, Callable[[], Figure]] = {}
    lines = total_throughput(s.scenarios)
    if lines:
        def total() -> Figure:
            fig, (ax,) = new_figure(8, 4.5)
            draw_total_throughput(ax, lines)
            return fig
        out[TOTAL_THROUGHPUT] = total
    for panel in pair_panels(s.scenarios):
        def pair(panel: PairPanels = panel) -> Figure:
            fig, (ax1, ax2) = new_figure(8, 7, 2, 1, sharex=True)
            draw_pair(ax1, ax2, panel)
            return fig
        out[pair_figure_name(panel.pair)] = pair
    return out


FIGURES = KindFigures(result=ClosedResult, build=closed_figures)
