"""The ``outsweep`` kind's part of the card: the fitted decode speed and a row per output length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen.card.kindparts import KindSection
from cardgen.schemas.summary import Summary
from cardgen_outsweep.analysis import OutSweepResult


def context(result: OutSweepResult, summary: Summary) -> dict[str, Any]:
    return {"r": result, "modelled": summary.modelled}


SECTION = KindSection(result=OutSweepResult, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads")
