"""A kind's own figures: the figures stage's half of the kind interface.

A kind that draws figures of its own names a :class:`KindFigures` (``Kind.figures``, ``"module:attribute"``, in
its folder): the type of its result (read back from ``summary.json``'s ``kinds``) and a function from that result
to the figures it has data for, each a file name and a function drawing a matplotlib Figure (made with
:func:`new_figure`, so every figure of the run shares the style and the deterministic PNG writer of
:mod:`cardgen.figures.render`). Its section finds a figure's path with :func:`cardgen.card.sections.figures.figure_path`.

    Kind.figures ──> KindFigures(result=R, build=f)     f(R, summary) -> {file name: () -> Figure}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cardgen.kinds import KINDS
from cardgen.kinds.kind import part
from cardgen.schemas.summary import KindResult, Summary


@dataclass(frozen=True)
class KindFigures:
    """A kind's figures."""

    result: type[KindResult]
    build: Callable[[Any, Summary], dict[str, Callable[[], Figure]]]  # its result, the run's summary


def new_figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw: Any) -> tuple[Figure, list[Axes]]:
    """A figure of ``rows`` x ``cols`` axes (constrained layout), its axes in reading order."""
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, [ax for row in axes for ax in row]


def kind_figures(summary: Summary) -> dict[str, Callable[[], Figure]]:
    """Every installed kind's figures that the run has a result for, by file name, in the kinds' order."""
    out: dict[str, Callable[[], Figure]] = {}
    for name, kind in KINDS.items():
        saved = summary.kinds.get(name)
        if kind.figures is None or saved is None:
            continue
        figures: KindFigures = part(kind.figures)
        out.update(figures.build(figures.result.model_validate(saved), summary))
    return out
