"""The KV cache section: each capacity estimate against the chosen one (what a kind adds to the section, its own
probe's table, is the kind's: :mod:`cardgen.card.kindparts`'s slot ``kv``)."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.summary import KVCapacity


def kv_estimates(kv: KVCapacity) -> TableView | None:
    """A row per estimate, the chosen one marked, each against it (None: no method gave one)."""
    if not kv.estimates:
        return None
    rows = []
    for e in kv.estimates:
        value = fmt.tokens(e.tokens) if e.tokens is not None else (
            f"≥ {fmt.tokens(e.lower_bound)}" if e.lower_bound is not None else fmt.DASH)
        chosen = " (chosen)" if e.method == kv.method else ""
        rows.append([e.method + chosen, value, fmt.integer_interval(e.low, e.high),
                     fmt.signed_pct(e.vs_chosen_pct) if e.method != kv.method else fmt.DASH, e.source])
    return TableView(["Method", "Tokens", "Spread", "vs chosen", "Based on"], rows, ["l", "r", "r", "r", "l"])
