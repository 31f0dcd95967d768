"""The SLO search: the highest load whose percentiles meet a service-level objective.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`; the bracket and the estimate in
``loadsearch.py``), its traits (here; listed in :data:`cardgen.kinds.KINDS`), and its stages past the load, named
below and imported only when they run: ``analysis.py`` its records -> its result (summary.json ``kinds.slo``),
``section.py`` that result -> its part of the card (``section.md.j2``), its rows of the main table and its answer
in the build's last line, ``figures.py`` a figure per search."""

from __future__ import annotations

from cardgen.kinds.kind import Kind
from cardgen.kinds.slosearch.program import SloProgram
from cardgen.kinds.slosearch.schema import SEARCH_REQUESTS, SloParams, SloSearch

__all__ = ["SEARCH_REQUESTS", "SLO", "SloParams", "SloProgram", "SloSearch"]


SLO = Kind[SloParams](
    "slo", description="the highest load (a rate or parallel users) that meets an SLO on TTFT, TPOT, ITL or E2E percentiles",
    entry=SloSearch, params=SloParams, program=SloProgram, fitted_figures=True,
    by_design=frozenset({"queue"}),  # the search probes loads past the limit: there requests queue
    expected_requests=lambda p: p.params.min_requests,
    analysis="cardgen.kinds.slosearch.analysis:ANALYSIS", section="cardgen.kinds.slosearch.section:SECTION",
    figures="cardgen.kinds.slosearch.figures:FIGURES")
