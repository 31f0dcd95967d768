"""Rendering a card, and the stage entry point that rebuilds every output of a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cardgen.analysis.analyse import Analysis, analyse, write_analysis
from cardgen.analysis.options import AnalysisOptions
from cardgen.analysis.rundata import load_run
from cardgen.card.context import CardContext, card_context
from cardgen.card.sections.head import card_date
from cardgen.card.templates import CARD_TEMPLATE, get_template
from cardgen.diff import write_digests
from cardgen.rundir import CARD_MD, RunDir
from cardgen.schemas.records import MetricSample

if TYPE_CHECKING:
    import pandas as pd

RenderOptions = AnalysisOptions  # what a render can be asked for today: the analysis' SLOs and thresholds


def render_markdown(context: CardContext, *, template: str = CARD_TEMPLATE) -> str:
    """The card's text from its context (pure). Runs of blank lines collapse to one; ends with one newline."""
    text = get_template(template).render(**context)
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if line == "" and (not lines or lines[-1] == ""):
            continue
        lines.append(line)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def render_card(analysis: Analysis, *, date: str) -> str:
    """The card of an analysed run (its summary must list the figure files already written)."""
    return render_markdown(card_context(analysis, date=date))


def render_run(run_dir: Path, *, options: RenderOptions | None = None,
               scrapes: Sequence[MetricSample] | None = None, frame: pd.DataFrame | None = None) -> Path:
    """Rebuild everything after the load stage from the raw files of ``run_dir``: ``summary.json``,
    ``tables/``, ``bootstrap.json``, ``figures/`` and ``README.md``. Returns the card's path. Rendering twice gives the same bytes;
    the date on the card is ``SOURCE_DATE_EPOCH`` when set, else the day the run ended.

    Raises :class:`cardgen.errors.RenderError` when ``run_dir`` is not a readable run directory. A run with
    nothing measurable still gets a card that says what is missing.
    """
    from cardgen.figures.render import write_figures  # noqa: PLC0415  matplotlib loads only when figures are drawn

    run_dir = Path(run_dir)
    # the records made rows as they are read, never all held; the scrapes and rows as the run's writer held them,
    # if it did
    data = load_run(run_dir, stream_requests=True, scrapes=scrapes, frame=frame)
    date = card_date(data.info)
    analysis = analyse(data, options=options)
    # each figure's bootstrap distribution, for comparisons (cardgen diff, site), computed while the PNGs are drawn
    analysis.summary.figures = write_figures(analysis, run_dir, meanwhile=lambda: write_digests(analysis, run_dir))
    write_analysis(analysis, run_dir)
    return RunDir(run_dir).write_text(CARD_MD, render_card(analysis, date=date))
