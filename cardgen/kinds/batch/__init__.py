"""The batch table (TGI's): rounds of a fixed batch sent at once.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`), its traits (here; listed in
:data:`cardgen.kinds.KINDS`), and its stages past the load, named below and imported only when they run:
``analysis.py`` its rounds -> the batch table and each point's precision (summary.json ``kinds.batch``,
``tables/batch.json`` and ``.csv``), ``section.py`` that table -> its part of the card (``section.md.j2``)."""

from __future__ import annotations

from dataclasses import replace

from cardgen.kinds.batch.program import BatchProgram
from cardgen.kinds.batch.schema import BatchParams, BatchSweep
from cardgen.kinds.kind import USERS, Kind, ReplayBudget
from cardgen.kinds.view import Params

__all__ = ["BATCH", "BatchParams", "BatchProgram", "BatchSweep"]


def cheap(point: Params[BatchParams], budget: ReplayBudget) -> BatchParams:
    """A replay on a fitted server: at most one warm-up round, then two rounds, no precision target."""
    batch = point.params
    return replace(batch, warmups=min(batch.warmups, 1), runs=2, max_runs=None, target_ci=None)


BATCH = Kind[BatchParams](
    "batch", description="rounds of a fixed batch of requests: the batch table, latency and throughput per batch size",
    entry=BatchSweep, params=BatchParams, program=BatchProgram, parallel=USERS, load_words="{parallel} parallel", diff_rank=2, replayed=True,
    fitted_figures=True, spot_check=1, check_load="batch", precision=("decode",), precision_note=" (mean decode)",
    by_design=frozenset({"queue"}),  # each round's batch is sent at once: its prefills wait their turn
    expected_requests=lambda p: (p.parallel or 1) * (p.params.warmups + p.params.runs),
    target_ci=lambda p: p.params.target_ci, cheap=cheap,
    analysis="cardgen.kinds.batch.analysis:ANALYSIS", section="cardgen.kinds.batch.section:SECTION", diff="cardgen.kinds.batch.diff:DIFF")
