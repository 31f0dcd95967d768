"""The growing waves' part of the card (:data:`SECTION`): in the KV cache section, after the capacity estimates
and the methods that gave none, a table of every wave the probe sent, its tokens, the KV usage it reached and what
saturated it (``section.md.j2``). The probe's estimate and its note are the KV section's own (``kv_cache``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.table import TableView
from cardgen.kinds.waves.analysis import SaturationProbe
from cardgen.schemas.summary import Summary


def waves_table(result: SaturationProbe) -> TableView | None:
    """A row per wave, in the order they ran (None: no wave)."""
    if not result.waves:
        return None
    rows = []
    for w in result.waves:
        signals = [name for name in ("queued", "preempted", "waiting", "stalled") if getattr(w, name)]
        rows.append([str(w.wave), str(w.size), fmt.integer(w.tokens_per_request),
                     fmt.integer(None if w.tokens_per_request is None else w.size * w.tokens_per_request),
                     fmt.pct(w.kv_usage_max), ", ".join(signals) or "no"])
    return TableView(["Wave", "Requests", "Tokens per request", "Tokens in the wave", "Max KV usage",
                      "Saturated"], rows, ["l", "r", "r", "r", "r", "l"])


def context(result: SaturationProbe, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run sent no wave)."""
    table = waves_table(result)
    return {"waves": table} if table is not None else None


SECTION = KindSection(result=SaturationProbe, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="kv", method=Path(__file__).with_name("method.md.j2"))
