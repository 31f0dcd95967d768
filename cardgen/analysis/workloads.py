"""The figures of the workloads people actually serve (pure): dataset-drawn serving tests
(:mod:`cardgen.analysis.serving`), the prefix cache (:mod:`cardgen.analysis.prefixcache`), and their files in
``tables/``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

import pandas as pd

from cardgen.analysis.chat import ChatResult, chat_turns
from cardgen.analysis.prefixcache import PrefixCacheResult, prefix_cache
from cardgen.analysis.serving import (
    NIGHTLY_JSON,
    DatasetGroup,
    LengthHistogram,
    dataset_groups,
    nightly_json,
    nightly_serving_table,
    sent_lengths,
)
from cardgen.datasets import SharedPrefixes
from cardgen.kinds import kind_of
from cardgen.points import Point
from cardgen.rundir import write_text_atomic
from cardgen.schemas.records import MetricSample
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import ScenarioSummary


class Conversing(Protocol):
    """What a point of a conversation kind holds (``Kind.conversation``): whether each turn renews the history's
    head, its conversations and the users' think time between turns."""

    @property
    def fresh_history(self) -> bool: ...
    @property
    def conversations(self) -> int: ...
    @property
    def think_time_s(self) -> float: ...



@dataclass
class Workloads:
    """What the card's workload sections print."""

    groups: list[DatasetGroup] = field(default_factory=list)
    nightly: pd.DataFrame = field(default_factory=pd.DataFrame)  # seed 003's serving table
    lengths: dict[str, LengthHistogram] = field(default_factory=dict)  # by dataset group
    prefix: list[PrefixCacheResult] = field(default_factory=list)  # per shared-prefix point
    chat: list[ChatResult] = field(default_factory=list)  # per chat point


def workloads(info: RunInfo, scenarios: Sequence[ScenarioSummary], requests: pd.DataFrame,
              metrics: Sequence[MetricSample] = (), *, points: Sequence[Point]) -> Workloads:
    """The workload figures of a run, of the ``points`` of the suite it ran."""
    chats = [(p, cast(Conversing, p.params)) for p in points if kind_of(p).conversation]
    chat = chat_turns(requests, metrics, engine=info.server.engine,
                      points=[(p.name, p.group, c.fresh_history, p.parallel or 1, c.conversations, c.think_time_s)
                              for p, c in chats])
    prefixes = [(p.name, cast(SharedPrefixes, p.params)) for p in points if kind_of(p).shared_prefix]
    prefix = prefix_cache(requests, metrics, engine=info.server.engine,
                          points=[(name, x.prefixes, x.prefix_tokens, x.suffix_tokens) for name, x in prefixes])
    groups = dataset_groups(points)
    lengths = {}
    for g in groups:
        hist = sent_lengths(requests, g.points)
        if hist is not None:
            lengths[g.group] = hist
    return Workloads(groups=groups, nightly=nightly_serving_table(scenarios, info, groups), lengths=lengths,
                     prefix=prefix, chat=chat)


def write_workloads(w: Workloads | None, out_dir: Path) -> list[str]:
    """``nightly_serving.json`` (and its CSV) when the run has a dataset serving table; the names written."""
    if w is None or w.nightly.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / NIGHTLY_JSON, nightly_json(w.nightly) + "\n")
    csv = NIGHTLY_JSON.replace(".json", ".csv")
    write_text_atomic(out_dir / csv, w.nightly.to_csv(index=False, lineterminator="\n"))
    return [NIGHTLY_JSON, csv]
