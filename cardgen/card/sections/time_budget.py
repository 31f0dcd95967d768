"""Where the time goes: each point's mean TTFT split into the engine's own parts, the engine's decode time per
token beside the client's, and a note for a part other than prompt compute that takes most of the time (not for one
the point's kind makes large on purpose: the table says "by design" there)."""

from __future__ import annotations

from collections.abc import Sequence

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.kinds import INGESTION, gives
from cardgen.schemas.summary import IngestionFit, ScenarioSummary, TimeBudget, TimeBudgets

PART_LABELS = {
    "queue": "Queue",
    "prompt": "Prompt compute",
    "other_server": "Other server time",
    "network_client": "Network and client",
    "outside_engine": "Outside the engine's account",
}


def duration(seconds: float | None) -> str:
    """Milliseconds below a second, seconds above."""
    return fmt.secs(seconds) if seconds is not None and abs(seconds) >= 1 else fmt.ms(seconds)


BY_DESIGN = "by design"  # beside a part the point's kind makes large on purpose (TimeBudget.by_design)


def _part(b: TimeBudget, name: str) -> str:
    part = b.part(name)
    if part is None or part.seconds is None:
        return fmt.DASH
    words = [fmt.pct(part.share)] if part.share is not None else []
    if b.by_design == name:
        words.append(BY_DESIGN)
    share = f" ({', '.join(words)})" if words else ""
    return f"{duration(part.seconds)}{share}"


def time_budget_table(tb: TimeBudgets) -> TableView | None:
    """A row per point (and the run), a column per part the engine accounted for, then per token."""
    rows_of = [*tb.points, *([tb.run] if tb.run is not None else [])]
    if not tb.available or not rows_of:
        return None
    present = [name for name in PART_LABELS if any(b.part(name) for b in rows_of)]
    rows = []
    for b in rows_of:
        rows.append([b.scope, str(b.requests), duration(b.client_ttft_s), *(_part(b, name) for name in present),
                     fmt.ms(b.engine_decode_per_token_s), fmt.ms(b.client_itl_s), fmt.ms(b.client_tpot_s)])
    columns = ["Point", "Requests", "Client TTFT (mean)", *(PART_LABELS[n] for n in present),
               "Engine decode per token", "Client ITL", "Client TPOT"]
    return TableView(columns, rows, ["l", "r", "r", *("r" for _ in present), "r", "r", "r"])


def dominant_notes(tb: TimeBudgets) -> list[str]:
    """One line per part other than prompt compute that takes most of the client's TTFT somewhere, as a finding
    (``dominant``: not where the point's kind makes it large on purpose): where, how much, and the engine setting
    that usually causes it."""
    by_part: dict[str, list[TimeBudget]] = {}
    for b in tb.points:
        if b.dominant:
            by_part.setdefault(b.dominant, []).append(b)
    notes = []
    for part, budgets in by_part.items():
        worst = max(budgets, key=lambda b: (p.share or 0.0) if (p := b.part(part)) else 0.0)
        shown = worst.part(part)
        where = ", ".join(b.scope for b in budgets[:4]) + (f" and {len(budgets) - 4} more" if len(budgets) > 4 else "")
        text = (f"{PART_LABELS[part]} takes most of the time to first token at {where} (up to "
                f"{fmt.pct(shown.share if shown else None)}, {duration(shown.seconds if shown else None)} of "
                f"{duration(worst.client_ttft_s)} at {worst.scope})")
        hint = next((b.hint for b in budgets if b.hint), None)
        notes.append(f"{text}: {hint}" if hint else text)
    return notes


def engine_ingestion(tb: TimeBudgets, fit: IngestionFit | None, scenarios: Sequence[ScenarioSummary]) -> str | None:
    """The ingestion speed both ways, where the engine gives its prompt time (per request, or as a histogram over
    the point's window): the client's (1 / slope of TTFT) and the engine's (prompt tokens / prompt compute, over
    the ingestion sweep of ``scenarios``, as its budget says it was read), with their ratio."""
    sweeps = {x.scenario for x in scenarios if gives(x, INGESTION)}
    ingest = next((b for b in tb.points if b.scope in sweeps and b.engine_prompt_tok_s), None)
    if ingest is None or ingest.engine_prompt_tok_s is None:
        return None
    method = ingest.engine_prompt_method or (f"prompt tokens it computed / its prompt compute, over the "
                                             f"{ingest.requests} requests of {ingest.scope}")
    text = f"The engine's own ingestion speed: {fmt.tok_s(ingest.engine_prompt_tok_s)} ({method})"
    if fit is not None and fit.tok_s:
        text += f"; the client's is {fmt.sig(fit.tok_s / ingest.engine_prompt_tok_s)}× it"
    return text + "."
