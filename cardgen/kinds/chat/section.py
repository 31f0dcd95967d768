"""The multi-turn chat's part of the card (:data:`SECTION`): TTFT per turn number, with and without the prefix
cache (``section.md.j2``), among the workload sections, after the prefix cache's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.table import TableView, median_ci
from cardgen.kinds.chat.analysis import ChatEntry, ChatTurns
from cardgen.schemas.summary import Summary


class ChatSection(TypedDict):
    """One chat entry: TTFT per turn number, with and without the prefix cache."""

    scenario: str
    users: int
    conversations: int
    think_time_s: float
    table: TableView
    hit_rates: str | None
    counters: str | None
    compared: bool  # the same conversations also ran with the cache defeated


def chat_section(r: ChatEntry) -> ChatSection:
    cold = {t.turn: t for t in r.no_cache.turns} if r.no_cache is not None else {}
    rows = []
    for t in r.cached.turns:
        row = [str(t.turn), str(t.requests), fmt.sig(t.prompt_tokens.p50), median_ci(t.ttft_s, fmt.ms),
               fmt.ms(t.ttft_s.p99)]
        if r.no_cache is not None:
            c = cold.get(t.turn)
            warm_p50, cold_p50 = t.ttft_s.p50, c.ttft_s.p50 if c is not None else None
            row += [median_ci(c.ttft_s, fmt.ms) if c is not None else fmt.DASH,
                    fmt.ms(cold_p50 - warm_p50) if cold_p50 is not None and warm_p50 is not None else fmt.DASH,
                    f"{cold_p50 / warm_p50:.2f}x" if cold_p50 is not None and warm_p50 else fmt.DASH]
        rows.append(row)
    columns = ["Turn", "Requests", "Prompt tokens (median)", "TTFT median (95 % CI)", "TTFT p99"]
    if r.no_cache is not None:
        columns += ["Without cache: TTFT median (95 % CI)", "Saved (median)", "Speed-up"]
    rates = None
    if r.cached.hit_rate is not None:
        rates = fmt.pct(r.cached.hit_rate)
        if r.no_cache is not None and r.no_cache.hit_rate is not None:
            rates += f" (with the cache defeated: {fmt.pct(r.no_cache.hit_rate)})"
    return ChatSection(scenario=r.cached.scenario, users=r.users, conversations=r.conversations,
                       think_time_s=r.think_time_s, table=TableView(columns, rows), hit_rates=rates,
                       counters=r.counters, compared=r.no_cache is not None)


def context(result: ChatTurns, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run's chat points sent nothing)."""
    return {"chat": [chat_section(r) for r in result.entries]} if result.entries else None


SECTION = KindSection(result=ChatTurns, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads", order=-1)  # after the prefix cache's (-2), before any other kind's
