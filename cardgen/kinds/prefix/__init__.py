"""The shared prefix: requests that share prefixes the point makes, a cold pass then warm ones.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`), its traits (here; listed in
:data:`cardgen.kinds.KINDS`), and its stages past the load: its analysis (``analysis.py``: cold against warm, saved
as ``summary.json`` ``kinds.prefix``) and its part of the card (``section.py`` and ``section.md.j2``: "Prefix
cache")."""

from __future__ import annotations

from cardgen.kinds.kind import Kind, Shared
from cardgen.kinds.prefix.program import PrefixProgram
from cardgen.kinds.prefix.schema import PrefixParams, SharedPrefix
from cardgen.kinds.program import Send
from cardgen.kinds.view import PointView

__all__ = ["PREFIX", "PrefixParams", "PrefixProgram", "SharedPrefix", "prefix_spans"]


def prefix_spans(point: PointView, send: Send) -> tuple[Shared, ...]:
    """A request of prefix ``send.prefix``: the prefix's ``prefix_tokens`` first (the point's own prefixes), then
    its own suffix."""
    if send.prefix is None:
        return ()
    shared = min(point.params_as(PrefixParams).prefix_tokens, send.prompt_tokens)
    return (Shared(("prefix", point.name, send.prefix), shared),)


PREFIX = Kind[PrefixParams](
    "prefix", description="prompts that share prefixes, cold then warm: what the prefix cache saves of TTFT",
    entry=SharedPrefix, params=PrefixParams, program=PrefixProgram, shared_prefix=True, shared_spans=prefix_spans,
    expected_requests=lambda p: p.params.prefixes * (1 + p.params.warm_rounds),
    longest_request=lambda p: p.params.prefix_tokens + p.params.suffix_tokens + p.output_tokens,
    analysis="cardgen.kinds.prefix.analysis:ANALYSIS", section="cardgen.kinds.prefix.section:SECTION")
