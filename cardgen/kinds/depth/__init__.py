"""Speed at context depth: prompt ingestion and decode speed after d tokens of context the server already holds
(``llama-bench -d``, asked of a serving endpoint).

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: a
fill, then requests at depth), its traits (here), and its stages past the load: its analysis (``analysis.py``:
ingestion and decode at each depth, whether the server reused the prefix; ``summary.json`` ``kinds.depth``), its
part of the card (``section.py`` and ``section.md.j2``: "Speed at context depth") and its figure (``figures.py``).

Its prompt plan (:func:`depth_spans`) is the one both interpreters follow: the point's ``depth`` tokens are one
shared span (the load engine writes it as the same text, :func:`cardgen.datasets.resolve`, through the params'
``prefixes`` / ``prefix_tokens`` / ``suffix_tokens``; the virtual server hashes it as the same blocks), the
request's ``new_tokens`` are its own."""

from __future__ import annotations

from cardgen.kinds.depth.program import DepthProgram
from cardgen.kinds.depth.schema import Depth, DepthParams
from cardgen.kinds.kind import Kind, Shared
from cardgen.kinds.program import Send
from cardgen.kinds.view import PointView

__all__ = ["DEPTH", "Depth", "DepthParams", "DepthProgram", "depth_spans"]


def depth_spans(point: PointView, send: Send) -> tuple[Shared, ...]:
    """Every request of a depth point: its ``depth`` tokens first (the point's own, the same for the fill and the
    requests at depth), then its own suffix."""
    depth = min(point.params_as(DepthParams).depth, send.prompt_tokens)
    return (Shared(("depth", point.name), depth),) if depth else ()


DEPTH = Kind[DepthParams](
    "depth", description="prompt ingestion and decode speed after d tokens of context the server holds (llama-bench -d)",
    entry=Depth, params=DepthParams, program=DepthProgram, shared_prefix=True, shared_spans=depth_spans,
    expected_requests=lambda p: 1 + p.params.repeats, diff_rank=3,
    analysis="cardgen.kinds.depth.analysis:ANALYSIS", section="cardgen.kinds.depth.section:SECTION",
    figures="cardgen.kinds.depth.figures:FIGURES")
