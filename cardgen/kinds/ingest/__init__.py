"""The ingestion sweep: single requests of growing prompt lengths, one at a time.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`)."""

from __future__ import annotations

from cardgen.kinds.ingest.program import IngestProgram
from cardgen.kinds.ingest.schema import Ingest, IngestParams
from cardgen.kinds.kind import Kind

__all__ = ["INGEST", "Ingest", "IngestParams", "IngestProgram"]


INGEST = Kind[IngestParams](
    "ingest", description="one request at a time over prompt lengths: prompt ingestion speed, the slope of TTFT against prompt tokens",
    entry=Ingest, params=IngestParams, program=IngestProgram, prefill_sweep=True, replayed=True, precision=("slope",), precision_note=" (slope)",
    expected_requests=lambda p: len(p.params.lengths) * p.params.repeats,
    prompt_lengths=lambda p: list(p.params.lengths), target_ci=lambda p: p.params.target_ci)
