"""LoRA adapters per point (pure): each adapter's figures, and how many distinct adapters were in flight.

- per adapter: its requests' TTFT, TPOT and decode speed (medians with bootstrap intervals), from the requests the
  point's own figures come from; its output throughput = the point's x its share of their output tokens;
- distinct adapters in flight = the time-weighted mean, over the point's span while any request of it is in
  flight (send to end of stream), of the number of distinct adapters among the requests in flight (the base
  model's requests count as none).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cardgen.analysis.stats import describe
from cardgen.schemas.summary import AdapterFigures, ScenarioSummary


def distinct_in_flight(rows: pd.DataFrame) -> float | None:
    """Time-weighted mean of distinct adapters among the requests in flight (None without a request in flight)."""
    events = sorted([(float(s), 1, a) for s, a in zip(rows["sent_at"], rows["adapter"], strict=True)]
                    + [(float(e), -1, a) for e, a in zip(rows["end_at"], rows["adapter"], strict=True)
                       if np.isfinite(e)], key=lambda x: (x[0], x[1]))
    active: dict[str, int] = {}
    busy = weighted = 0.0
    last = None
    for t, step, adapter in events:
        if last is not None and any(active.values()):
            busy += t - last
            weighted += (t - last) * sum(1 for a, n in active.items() if n and a)
        active[adapter] = active.get(adapter, 0) + step
        last = t
    return weighted / busy if busy > 0 else None


def adapter_figures(summary: ScenarioSummary, ok: pd.DataFrame, rows: pd.DataFrame) -> None:
    """Fill ``summary``'s LoRA figures: nothing for a point whose requests name no adapter. ``ok``: the successful
    requests its figures come from; ``rows``: every request it sent (for the adapters in flight)."""
    if not (rows["adapter"] != "").any():
        return
    summary.adapters_in_flight = distinct_in_flight(rows[rows["ok"]])
    total = float(ok["output_tokens"].sum())
    for adapter, g in ok.groupby("adapter", sort=True):
        share = float(g["output_tokens"].sum()) / total if total > 0 else None
        summary.per_adapter.append(AdapterFigures(
            adapter=str(adapter), requests=len(g), ttft_s=describe(g["ttft_s"]), tpot_s=describe(g["tpot_s"]),
            decode_tok_s=describe(g["decode_tok_s"]),
            output_tok_s=summary.output_tok_s * share if summary.output_tok_s is not None and share is not None
            else None))
