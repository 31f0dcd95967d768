"""Multi-turn chat (pure): TTFT per turn number, how the prompt grows with the history, and what the prefix
cache saves.

- Per turn number (1, 2 ...): the requests of that turn in every conversation; their prompt tokens (the
  server's ``usage``) and TTFT, median with a bootstrap 95 % interval.
- **Without the cache**: the same conversations run again with a new id at the head of the history every turn
  (the entry's ``compare_no_cache``), so nothing the server saw before is a prefix of the prompt. The saving of
  a turn is the no-cache median TTFT less the cached one; the speed-up their ratio.
- **Server hit rate** over each chat point: the growth of the server's prefix-cache hits over that of its
  queries, both in prompt tokens (as :mod:`cardgen.analysis.prefixcache` reads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen.analysis.prefixcache import _window_delta
from cardgen.analysis.stats import describe
from cardgen.engines import metric_names
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import Distribution


@dataclass(frozen=True)
class TurnFigures:
    turn: int
    requests: int
    prompt_tokens: Distribution
    ttft_s: Distribution


@dataclass(frozen=True)
class ChatRun:
    """One chat point: its turns and the server's hit rate over it."""

    scenario: str
    turns: list[TurnFigures]
    hit_rate: float | None


@dataclass(frozen=True)
class ChatResult:
    group: str
    users: int
    conversations: int
    think_time_s: float
    cached: ChatRun
    no_cache: ChatRun | None  # the same conversations with the cache defeated
    counters: str | None  # what the hit rates were read from


def _run(rows: pd.DataFrame, metrics: Sequence[MetricSample], name: str, queries: str,
         hits: str) -> tuple[ChatRun, bool]:
    turns = [TurnFigures(turn=int(turn), requests=len(g), prompt_tokens=describe(g["prompt_tokens"]),
                         ttft_s=describe(g["ttft_s"]))
             for turn, g in rows[rows["ok"]].groupby("turn", sort=True)]
    start, end = float(rows["sent_at"].min()), float(np.nanmax(rows["end_at"].to_numpy(dtype=float)))
    q, h = _window_delta(metrics, queries, start, end), _window_delta(metrics, hits, start, end)
    hit_rate = h / q if q is not None and h is not None and q > 0 else None
    return ChatRun(scenario=name, turns=turns, hit_rate=hit_rate), hit_rate is not None


def chat_turns(requests: pd.DataFrame, metrics: Sequence[MetricSample], *, engine: str | None,
               points: Sequence[tuple[str, str, bool, int, int, float]]) -> list[ChatResult]:
    """One result per chat entry that sent requests; ``points`` are (name, group, fresh history, users,
    conversations, think time) of the run's chat points."""
    names = metric_names(engine)
    queries, hits = names.get("prefix_cache_queries", ""), names.get("prefix_cache_hits", "")
    runs: dict[tuple[str, bool], tuple[ChatRun, bool, tuple[int, int, float]]] = {}
    for name, group, fresh, users, conversations, think in points:
        rows = requests[requests["scenario"] == name] if not requests.empty else requests
        if rows.empty:
            continue
        run, counted = _run(rows, metrics, name, queries, hits)
        runs[(group, fresh)] = (run, counted, (users, conversations, think))
    out = []
    for (group, fresh), (run, counted, (users, conversations, think)) in runs.items():
        if fresh:
            continue
        other = runs.get((group, True))
        out.append(ChatResult(group=group, users=users, conversations=conversations, think_time_s=think,
                              cached=run, no_cache=other[0] if other else None,
                              counters=f"{hits} / {queries}" if counted else None))
    return out
