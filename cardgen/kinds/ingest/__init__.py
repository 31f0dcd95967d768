"""The ingestion sweep: single requests of growing prompt lengths, one at a time.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`)."""

from __future__ import annotations

from dataclasses import replace

from cardgen.kinds.ingest.program import IngestProgram
from cardgen.kinds.ingest.schema import Ingest, IngestParams
from cardgen.kinds.kind import INGESTION, Kind, ReplayBudget
from cardgen.kinds.view import Params

__all__ = ["INGEST", "Ingest", "IngestParams", "IngestProgram"]


def with_lengths(params: IngestParams | None, lengths: tuple[int, ...]) -> IngestParams:
    """``params`` over ``lengths`` instead (None: a new sweep of them, once)."""
    return IngestParams(lengths=lengths, repeats=1) if params is None else replace(params, lengths=lengths)


def cheap(point: Params[IngestParams], budget: ReplayBudget) -> IngestParams:
    """A replay on a fitted server: one sweep, no precision target."""
    return replace(point.params, repeats=1, target_ci=None)


INGEST = Kind[IngestParams](
    "ingest", description="one request at a time over prompt lengths: prompt ingestion speed, the slope of TTFT against prompt tokens",
    entry=Ingest, params=IngestParams, program=IngestProgram, headlines=frozenset({INGESTION}), replayed=True, precision=("slope",), precision_note=" (slope)",
    expected_requests=lambda p: len(p.params.lengths) * p.params.repeats,
    prompt_lengths=lambda p: list(p.params.lengths), target_ci=lambda p: p.params.target_ci,
    with_lengths=with_lengths, cheap=cheap)
