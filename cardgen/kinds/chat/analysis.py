"""Multi-turn chat (pure): the kind's analysis (:data:`ANALYSIS`, saved as ``summary.json`` ``kinds.chat``). TTFT
per turn number, how the prompt grows with the history, and what the prefix cache saves.

- Per turn number (1, 2 ...): the requests of that turn in every conversation; their prompt tokens (the
  server's ``usage``) and TTFT, median with a bootstrap 95 % interval.
- **Without the cache**: the same conversations run again with a new id at the head of the history every turn
  (the entry's ``compare_no_cache``), so nothing the server saw before is a prefix of the prompt. The saving of
  a turn is the no-cache median TTFT less the cached one; the speed-up their ratio.
- **Server hit rate** over each chat point: the growth of the server's prefix-cache hits over that of its
  queries, both in prompt tokens (:func:`cardgen.analysis.timeseries.counter_growth`).

What it saves (:class:`ChatTurns`) the card reads back (:mod:`cardgen.kinds.chat.section`). Runs analysed before
the kinds kept their own results saved none of it (the card was made from the analysis in memory): ``cardgen
render`` of such a run makes it from the run's raw files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.stats import describe
from cardgen.analysis.timeseries import counter_growth
from cardgen.kinds.chat.schema import ChatParams
from cardgen.schemas.records import MetricSample
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import Distribution, KindResult


class TurnFigures(Saved):
    turn: int
    requests: int
    prompt_tokens: Distribution
    ttft_s: Distribution


class ChatRun(Saved):
    """One chat point: its turns and the server's hit rate over it."""

    scenario: str
    turns: list[TurnFigures]
    hit_rate: float | None


class ChatEntry(Saved):
    """One chat entry of the suite: its conversations, with the cache and (``compare_no_cache``) without."""

    group: str
    users: int
    conversations: int
    think_time_s: float
    cached: ChatRun
    no_cache: ChatRun | None  # the same conversations with the cache defeated
    counters: str | None  # what the hit rates were read from


class ChatTurns(KindResult):
    """Every chat entry of the run that sent requests, in suite order."""

    version: int = 1
    entries: list[ChatEntry] = Field(default_factory=list)


def _run(rows: pd.DataFrame, metrics: Sequence[MetricSample], name: str, *,
         engine: str | None) -> tuple[ChatRun, str | None]:
    """The point's figures, and what its hit rate was read from (None: the server counts no hits)."""
    turns = [TurnFigures(turn=int(turn), requests=len(g), prompt_tokens=describe(g["prompt_tokens"]),
                         ttft_s=describe(g["ttft_s"]))
             for turn, g in rows[rows["ok"]].groupby("turn", sort=True)]
    start, end = float(rows["sent_at"].min()), float(np.nanmax(rows["end_at"].to_numpy(dtype=float)))
    q = counter_growth(metrics, engine=engine, role="prefix_cache_queries", start=start, end=end)
    h = counter_growth(metrics, engine=engine, role="prefix_cache_hits", start=start, end=end)
    if q is not None and h is not None and q.value > 0:
        return ChatRun(scenario=name, turns=turns, hit_rate=h.value / q.value), f"{h.name} / {q.name}"
    return ChatRun(scenario=name, turns=turns, hit_rate=None), None


def analyse(run: KindRun) -> ChatTurns | None:
    """One figure set per chat entry that sent requests (its cached point, with its no-cache twin where it ran);
    None where none did."""
    requests = run.requests
    runs: dict[tuple[str, bool], tuple[ChatRun, str | None, tuple[int, int, float]]] = {}
    for point in run.points:
        params = point.params_as(ChatParams)
        rows = requests[requests["scenario"] == point.name] if not requests.empty else requests
        if rows.empty:
            continue
        figures, counters = _run(rows, run.metrics, point.name, engine=run.info.server.engine)
        runs[(point.group, params.fresh_history)] = (figures, counters,
                                                    (point.parallel or 1, params.conversations, params.think_time_s))
    out = []
    for (group, fresh), (figures, counters, (users, conversations, think)) in runs.items():
        if fresh:
            continue
        other = runs.get((group, True))
        out.append(ChatEntry(group=group, users=users, conversations=conversations, think_time_s=think,
                             cached=figures, no_cache=other[0] if other else None, counters=counters))
    return ChatTurns(entries=out) if out else None


ANALYSIS = KindAnalysis(result=ChatTurns, analyse=analyse)
