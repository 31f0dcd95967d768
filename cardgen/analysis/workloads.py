"""The figures of the workloads people actually serve (pure): dataset-drawn serving tests
(:mod:`cardgen.analysis.serving`), and their files in ``tables/``. A kind whose workload is its own analyses it in
its folder (:mod:`cardgen.analysis.kindparts`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cardgen.analysis.serving import (
    NIGHTLY_JSON,
    DatasetGroup,
    LengthHistogram,
    dataset_groups,
    nightly_json,
    nightly_serving_table,
    sent_lengths,
)
from cardgen.points import Point
from cardgen.rundir import write_text_atomic
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import ScenarioSummary


@dataclass
class Workloads:
    """What the card's workload sections print."""

    groups: list[DatasetGroup] = field(default_factory=list)
    nightly: pd.DataFrame = field(default_factory=pd.DataFrame)  # seed 003's serving table
    lengths: dict[str, LengthHistogram] = field(default_factory=dict)  # by dataset group


def workloads(info: RunInfo, scenarios: Sequence[ScenarioSummary], requests: pd.DataFrame, *,
              points: Sequence[Point]) -> Workloads:
    """The workload figures of a run, of the ``points`` of the suite it ran."""
    groups = dataset_groups(points)
    lengths = {}
    for g in groups:
        hist = sent_lengths(requests, g.points)
        if hist is not None:
            lengths[g.group] = hist
    return Workloads(groups=groups, nightly=nightly_serving_table(scenarios, info, groups), lengths=lengths)


def write_workloads(w: Workloads | None, out_dir: Path) -> list[str]:
    """``nightly_serving.json`` (and its CSV) when the run has a dataset serving table; the names written."""
    if w is None or w.nightly.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / NIGHTLY_JSON, nightly_json(w.nightly) + "\n")
    csv = NIGHTLY_JSON.replace(".json", ".csv")
    write_text_atomic(out_dir / csv, w.nightly.to_csv(index=False, lineterminator="\n"))
    return [NIGHTLY_JSON, csv]
