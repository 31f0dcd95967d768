"""The open loop: arrivals at a rate, independent of completions, or a trace replayed at its own times.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`)."""

from __future__ import annotations

from cardgen.kinds.kind import Kind
from cardgen.kinds.openloop.program import OpenProgram
from cardgen.kinds.openloop.schema import OpenLoop, OpenParams

__all__ = ['OPEN', 'OpenLoop', 'OpenParams', 'OpenProgram']


OPEN = Kind[OpenParams](
    "open", program=OpenProgram, load_words="{rate}", rate_driven=True, diff_rank=1, replayed=True, fitted_figures=True, spot_check=2,
    check_load="rate", expected_requests=lambda p: p.params.num_requests)
