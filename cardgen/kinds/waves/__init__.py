"""Waves of growing size at once: the KV cache profiled by what the server says.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`). Its stages past the load are named below and imported only when they run:
``analysis.py`` the saturation probe (summary.json ``kinds.waves``: the waves, and the estimate of the KV capacity
it adds to ``kv_cache``), ``section.py`` its table of waves in the card's KV section (``section.md.j2``)."""

from __future__ import annotations

from cardgen.kinds.kind import LARGEST_GROUP, Kind
from cardgen.kinds.waves.program import WavesProgram
from cardgen.kinds.waves.schema import Waves, WavesParams

__all__ = ["WAVES", "Waves", "WavesParams", "WavesProgram"]


WAVES = Kind[WavesParams](
    "waves", description="waves of growing size sent at once: the KV cache's capacity, from where the server starts to queue or preempt",
    entry=Waves, params=WavesParams, program=WavesProgram, parallel=LARGEST_GROUP, load_words="waves up to {parallel}",
    client_timed=False,  # its figures are where the server queued or preempted, not the client's timings
    largest=lambda p: p.params.max_wave,
    measured_when=lambda kv_declared: None if kv_declared else (
        "the KV cache's capacity: the server does not declare it, and the fit reads it rather than fitting it"),
    by_design=frozenset({"queue"}),  # each wave is sent at once, to fill the server until it queues
    expected_requests=lambda p: sum(range(1, p.params.max_wave + 1, p.params.step)),
    analysis="cardgen.kinds.waves.analysis:ANALYSIS", section="cardgen.kinds.waves.section:SECTION")
