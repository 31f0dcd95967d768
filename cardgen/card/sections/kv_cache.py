"""The KV cache section: each capacity estimate against the chosen one, and the growing waves."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.summary import KVCapacity


def kv_views(kv: KVCapacity) -> tuple[TableView | None, TableView | None]:
    est = None
    if kv.estimates:
        rows = []
        for e in kv.estimates:
            value = fmt.tokens(e.tokens) if e.tokens is not None else (
                f"≥ {fmt.tokens(e.lower_bound)}" if e.lower_bound is not None else fmt.DASH)
            chosen = " (chosen)" if e.method == kv.method else ""
            rows.append([e.method + chosen, value, fmt.integer_interval(e.low, e.high),
                         fmt.signed_pct(e.vs_chosen_pct) if e.method != kv.method else fmt.DASH, e.source])
        est = TableView(["Method", "Tokens", "Spread", "vs chosen", "Based on"], rows, ["l", "r", "r", "r", "l"])
    waves = None
    if kv.waves:
        rows = []
        for w in kv.waves:
            signals = [name for name in ("queued", "preempted", "waiting", "stalled") if getattr(w, name)]
            rows.append([str(w.wave), str(w.size), fmt.integer(w.tokens_per_request),
                         fmt.integer(None if w.tokens_per_request is None else w.size * w.tokens_per_request),
                         fmt.pct(w.kv_usage_max), ", ".join(signals) or "no"])
        waves = TableView(["Wave", "Requests", "Tokens per request", "Tokens in the wave", "Max KV usage",
                           "Saturated"], rows, ["l", "r", "r", "r", "r", "l"])
    return est, waves
