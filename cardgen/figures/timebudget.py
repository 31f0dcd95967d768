"""The time-budget figure: each point's mean time to first token as a stacked bar of its parts (queue, prompt
compute, other server time, network and client), from :mod:`cardgen.analysis.timebudget`. Data (pure), then
drawing onto a given ``Axes``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes

from cardgen.schemas.summary import TimeBudget

#: the parts in the order they stack, with their labels and colours
PART_STYLE = {
    "queue": ("queue", "tab:orange"),
    "prompt": ("prompt compute", "tab:blue"),
    "other_server": ("other server time", "tab:red"),
    "network_client": ("network and client", "tab:gray"),
    "outside_engine": ("outside the engine's account", "tab:purple"),
}


@dataclass(frozen=True)
class BudgetBars:
    """One bar per point (``labels``), and per part the seconds it takes in each bar."""

    labels: list[str]
    parts: dict[str, list[float]]


def budget_bars(budgets: Sequence[TimeBudget]) -> BudgetBars | None:
    """The points' bars, parts below zero (a difference of two means within noise) drawn as zero; None when no
    point has parts."""
    shown = [b for b in budgets if b.parts]
    if not shown:
        return None
    parts: dict[str, list[float]] = {}
    for name in PART_STYLE:
        values = [max(0.0, (p.seconds or 0.0)) if (p := b.part(name)) else 0.0 for b in shown]
        if any(values):
            parts[name] = values
    return BudgetBars(labels=[b.scope for b in shown], parts=parts)


def draw_budget(ax: Axes, bars: BudgetBars) -> None:
    """Horizontal stacked bars, in seconds, the first point at the top."""
    y = list(range(len(bars.labels)))[::-1]
    left = [0.0] * len(y)
    for name, values in bars.parts.items():
        label, color = PART_STYLE[name]
        ax.barh(y, values, left=left, color=color, label=label, height=0.6)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(y, bars.labels, fontsize="small")
    ax.set_xlabel("mean time to first token (s)")
    ax.set_title("Where the time to first token goes")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="best", fontsize="small")
