"""Constrained decoding under load: requests whose answers must follow a JSON schema, or must call one of a set
of tools, interleaved with free requests of the same lengths at each parallel count.

This folder owns the kind: its suite entry and its points' params (``schema.py``), the schemas it ships and the
judge of an answer (``schemas.py``), its program (``program.py``: the alternating rounds), its requests' shape
(``shape.py``: the body's ``response_format`` or ``tools``, the record's verdict, the virtual server's decode
factor), its analysis (``analysis.py``: ``summary.json`` ``kinds.structured``), its part of the card
(``section.py``, ``section.md.j2``: "Structured output and tool calls") and its figure (``figures.py``)."""

from __future__ import annotations

from cardgen.kinds.kind import USERS, Kind
from cardgen.kinds.structured.program import StructuredProgram
from cardgen.kinds.structured.schema import Structured, StructuredParams

__all__ = ["STRUCTURED", "Structured", "StructuredParams", "StructuredProgram"]

STRUCTURED = Kind[StructuredParams](
    "structured",
    description="constrained decoding under load: JSON-schema and tool-call requests beside free ones, "
                "the overhead on TTFT and TPOT and the share of answers that validate",
    entry=Structured, params=StructuredParams, program=StructuredProgram, parallel=USERS,
    load_words="{parallel} parallel, constrained and free in turn",
    expected_requests=lambda p: 2 + 2 * p.params.rounds * (p.parallel or 1),
    analysis="cardgen.kinds.structured.analysis:ANALYSIS", section="cardgen.kinds.structured.section:SECTION",
    figures="cardgen.kinds.structured.figures:FIGURES", shape="cardgen.kinds.structured.shape:SHAPE",
    diff="cardgen.kinds.structured.diff:DIFF", diff_rank=5, diff_by_name=True)
