"""The ``outsweep`` kind: one request at a time over output lengths, at one prompt length; the decode speed of a
lone request is the slope of its end-to-end time against its output tokens (what one request's prefill and
overheads add is the line's intercept, so it drops out).

A kind is a :class:`cardgen.kinds.kind.Kind` found through the ``cardgen.kinds`` entry points (pyproject.toml).
This package holds all of it:

    schema.py       its suite entry (``kind: outsweep`` in a suite) and its points' params
    program.py      its program: what a point sends and when it stops (no clock, no socket)
    analysis.py     its records -> its result (summary.json ``kinds.outsweep``)
    section.py      its result -> its part of the card (section.md.j2 beside it)
"""

from __future__ import annotations

from cardgen.kinds.kind import Kind
from cardgen_outsweep.program import OutSweepProgram
from cardgen_outsweep.schema import OutSweep, OutSweepParams

__all__ = ["OUTSWEEP"]

OUTSWEEP = Kind[OutSweepParams](
    "outsweep", description="one request at a time over output lengths: a lone request's decode speed, from the "
    "slope of its end-to-end time", entry=OutSweep, params=OutSweepParams, program=OutSweepProgram,
    expected_requests=lambda p: len(p.params.lengths) * p.params.repeats,
    longest_request=lambda p: p.prompt_tokens + max(p.params.lengths),
    analysis="cardgen_outsweep.analysis:ANALYSIS", section="cardgen_outsweep.section:SECTION")
