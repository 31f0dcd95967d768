"""The open loop's part of the card (:data:`SECTION`, ``section.md.j2``): under "Serving under load (rates)", what
its load is and vLLM's serving table of its rates, or that the run has none (FastGen's table and the latency
figures that follow compare every serving load's points, :mod:`cardgen.sweeps`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen.card.kindparts import KindSection
from cardgen.card.sections.frames import serving_view
from cardgen.kinds.openloop.analysis import OpenResult, serving_table
from cardgen.schemas.summary import Summary


def context(result: OpenResult | None, s: Summary) -> dict[str, Any]:
    """What ``section.md.j2`` prints (shown for every run: a run without open-loop rates says so)."""
    return {"serving": serving_view(serving_table(s.scenarios, gpu=s.gpu)) if result is not None else None}


SECTION = KindSection(result=OpenResult, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="rates", always=True)
