"""The closed loop: ``parallel`` users, each sending its next request when its last one ends.

This folder owns the kind: its suite entry and its points' params (``schema.py``), its program (``program.py``: what
a point sends and when it stops, in the language of :mod:`cardgen.kinds.program`), its analysis (``analysis.py``:
the capacity thresholds, FlexGen's scale table), its part of the card (``section.py``, ``section.md.j2``), its
figures (``figures.py``), how ``cardgen diff`` resamples it (``diff.py``) and its traits (here; listed in
:data:`cardgen.kinds.KINDS`: it gives the generation headline, its points keep a steady window)."""

from __future__ import annotations

from dataclasses import replace

from cardgen.kinds.closed.program import ClosedJudge, ClosedProgram
from cardgen.kinds.closed.schema import ClosedLoop, ClosedParams
from cardgen.kinds.kind import GENERATION, USERS, Kind, ReplayBudget, Sweep
from cardgen.kinds.view import Params

__all__ = ["CLOSED", "ClosedJudge", "ClosedLoop", "ClosedParams", "ClosedProgram"]


def cheap(point: Params[ClosedParams], budget: ReplayBudget) -> ClosedParams:
    """A replay on a fitted server: a fixed number of requests (the measured point's own, else ``rounds`` rounds
    of its users and at least ``min_requests``), no duration and no precision target."""
    n = budget.requests or max(budget.min_requests, (point.parallel or 1) * budget.rounds)
    return replace(point.params, min_requests=n, max_requests=n, min_duration_s=0.0, max_duration_s=None,
                   target_ci=None)


CLOSED = Kind[ClosedParams](
    "closed", description="a closed loop of N parallel users: generation speed, TTFT, ITL and throughput at N parallel requests",
    entry=ClosedLoop, params=ClosedParams, program=ClosedProgram, judge=ClosedJudge, parallel=USERS, load_words="{parallel} parallel",
    sweep=Sweep("closed loop", "parallel requests", order=lambda s: s.parallel or 0, label=lambda s: f"{s.parallel}",
                shown=lambda s: s.parallel is not None and s.requests > 0),
    steady_window=True, headlines=frozenset({GENERATION}), watch_saturation=True, diff_rank=0, replayed=True,
    fitted_figures=True, spot_check=0, check_load="parallel count", precision=("speed_from_start", "ttft"),
    expected_requests=lambda p: p.params.min_requests, target_ci=lambda p: p.params.target_ci,
    skip_after_saturation=lambda p: p.params.stop_at_saturation, cheap=cheap,
    analysis="cardgen.kinds.closed.analysis:ANALYSIS", section="cardgen.kinds.closed.section:SECTION",
    figures="cardgen.kinds.closed.figures:FIGURES", diff="cardgen.kinds.closed.diff:DIFF")
