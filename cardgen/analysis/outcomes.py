"""How each point of the suite ran, from ``run.json``'s ``points``: which records count, why each point stopped,
and the points that sent nothing.

**Superseded records.** ``cardgen resume`` reruns a point that was cut off as a new attempt. The records of the
earlier attempts stay in ``requests.jsonl`` (nothing is ever deleted) but are superseded: a record counts only
when its ``attempt`` is its point's ``attempt`` in ``run.json``. Superseded records are left out of every
figure and counted apart; the comparison with the server's own counters and the GPU's energy keep them, since
the server served them. A run written before points were recorded counts every record.

**Points that were not run.** A suite with ``stop_at_saturation`` does not run the larger parallel counts of a
prompt / output pair once one saturated the server (:mod:`cardgen.saturation`); an interrupted run never reaches
its last points. Each still has a scenario row, with no request and no figure, saying why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from pydantic import ValidationError

from cardgen.kinds import kind_of
from cardgen.points import Point, expand
from cardgen.schemas.run import PointOutcome, RunInfo, point_attempts
from cardgen.schemas.summary import ScenarioSummary
from cardgen.suite import Suite


def counted_mask(requests: pd.DataFrame, points: Sequence[PointOutcome]) -> np.ndarray:
    """Which rows of the request frame count (:func:`cardgen.schemas.run.record_counts`, row by row): a record
    of a point ``run.json`` lists counts when it was sent by the point's recorded attempt; a record of a point it
    does not list (or of a run with no points) counts."""
    if requests.empty:
        return np.zeros(0, dtype=bool)
    attempts = point_attempts(list(points))
    expected = requests["scenario"].map(attempts)
    return (expected.isna() | (requests["attempt"] == expected)).to_numpy(dtype=bool)


def suite_points(info: RunInfo) -> dict[str, Point]:
    """The suite's points by name, expanded from ``run.json``'s ``suite_spec`` (the names the load stage gave
    them); empty when the spec is missing or no longer parses. :func:`cardgen.analysis.analyse.analyse` expands
    them once and hands them to every module that needs them."""
    try:
        suite = Suite.model_validate(info.suite_spec)
    except ValidationError:
        return {}
    return {p.name: p for p in expand(suite)}


def silent_summary(outcome: PointOutcome, point: Point | None) -> ScenarioSummary:
    """The row of a point that has no counted request: its parameters from the suite, and why."""
    rate = point.rate_rps if point is not None else None
    return ScenarioSummary(
        scenario=outcome.name, kind=outcome.kind, group=point.group if point else "",
        endpoint=point.endpoint if point else "completions",
        prompt_tokens=point.prompt_tokens if point else 0, output_tokens=point.output_tokens if point else 0,
        parallel=_parallel(outcome, point), rate_rps=rate if rate is not None and math.isfinite(rate) else None,
        all_at_once=rate is not None and math.isinf(rate))  # a point's rate is its arrivals'


def _parallel(outcome: PointOutcome, point: Point | None) -> int | None:
    """A point's parallel count as a row says it: its users, or its largest group sent at once (``Kind.row_parallel``)."""
    return kind_of(outcome).row_parallel(point) if point is not None else None


def with_outcomes(scenarios: Sequence[ScenarioSummary], info: RunInfo, *, points: Mapping[str, Point],
                  superseded: dict[str, int]) -> list[ScenarioSummary]:
    """The scenarios in suite order (``run.json``'s points), each with why it stopped, its saturation, its
    precision target (from the suite's ``points``, by name) and its superseded records; a row for every listed
    point that has no counted request (skipped, or never reached); then the scenarios ``run.json`` does not
    list, in run order."""
    by_name = {s.scenario: s for s in scenarios}
    out: list[ScenarioSummary] = []
    for outcome in info.points:
        point = points.get(outcome.name)
        summary = by_name.pop(outcome.name, None) or silent_summary(outcome, point)
        summary.stop, summary.stop_detail, summary.saturation = outcome.stop, outcome.detail, outcome.saturation
        summary.client_kept_up, summary.client = outcome.client_kept_up, outcome.client
        summary.target_ci = point.target_ci() if point is not None else None
        out.append(summary)
    out += [s for s in scenarios if s.scenario in by_name]
    for s in out:
        s.superseded_requests = superseded.get(s.scenario, 0)
    return out
