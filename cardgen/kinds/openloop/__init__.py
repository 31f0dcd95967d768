"""The open loop: arrivals at a rate, independent of completions, or a trace replayed at its own times.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`), its analysis (``analysis.py``:
vLLM's serving table), its part of the card (``section.py``, ``section.md.j2``) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`; its ``sweep`` lines its rates up beside other serving loads)."""

from __future__ import annotations

import math

from cardgen.kinds.kind import Kind, Shared, Sweep
from cardgen.kinds.openloop.program import OpenProgram
from cardgen.kinds.openloop.schema import OpenLoop, OpenParams
from cardgen.kinds.program import Send
from cardgen.kinds.view import PointView

__all__ = ["OPEN", "OpenLoop", "OpenParams", "OpenProgram", "trace_spans"]


def trace_spans(point: PointView, send: Send) -> tuple[Shared, ...]:
    """A replayed trace's request: the trace's prompt blocks it shares (``blocks``, by id, ``block_tokens`` each),
    then its own tail; a request of a rate's, nothing shared."""
    params = point.params_as(OpenParams)
    if not params.replay or send.item is None or not params.blocks:
        return ()
    return tuple(Shared(("trace", point.dataset, h), params.block_tokens) for h in params.blocks[send.item])


def open_streams(point: PointView, chunks_s: float) -> int:
    """The streams an open loop keeps open at once: its arrival rate times a request's duration (its output at
    ``chunks_s`` chunks a second), every request where they are all sent at once, never more than it sends."""
    rate, requests = point.rate_rps or 0.0, point.params_as(OpenParams).num_requests
    if math.isinf(rate):
        return requests
    return min(requests, math.ceil(rate * point.output_tokens / chunks_s) + 1)


OPEN = Kind[OpenParams](
    "open", description="Poisson arrivals at given rates, or a trace replayed at its own times: the serving table",
    entry=OpenLoop, params=OpenParams, program=OpenProgram, load_words="{rate}",
    sweep=Sweep("open loop", "rate", order=lambda s: math.inf if s.all_at_once else (s.rate_rps or 0),
                label=lambda s: s.rate_label if s.all_at_once else f"{s.rate_label}/s",
                shown=lambda s: s.requests > s.failed and not s.replay),  # a replay has its own timeline
    replays=lambda p: p.params.replay,
    by_design_row=lambda s: frozenset({"queue"}) if s.all_at_once else frozenset(), diff_rank=1, replayed=True,
    fitted_figures=True, spot_check=2, check_load="rate", shared_spans=trace_spans,
    expected_requests=lambda p: p.params.num_requests, streams=open_streams,
    analysis="cardgen.kinds.openloop.analysis:ANALYSIS", section="cardgen.kinds.openloop.section:SECTION")
