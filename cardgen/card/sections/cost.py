"""The card's cost: what a million tokens cost at every closed- and open-loop point, from run.json's price per
GPU-hour (:mod:`cardgen.analysis.cost`), and tokens per joule where the GPUs' energy was measured."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.summary import Summary


def cost_table(s: Summary) -> TableView | None:
    """Per closed- and open-loop point that ran: throughput and cost per million tokens (None without a price)."""
    if s.price_per_gpu_hour is None:
        return None
    rows = []
    for x in s.scenarios:
        if x.kind not in ("closed", "open") or not x.requests:
            continue
        load = (f"{x.parallel} parallel" if x.kind == "closed" else
                "all at once" if x.all_at_once else f"{x.rate_label} req/s" if x.rate_rps is not None else "trace")
        rows.append([x.scenario, load, fmt.sig(x.output_tok_s), fmt.sig(x.total_tok_s),
                     fmt.usd(x.usd_per_million_output_tokens), fmt.usd(x.usd_per_million_tokens)])
    if not rows:
        return None
    return TableView(["Point", "Load", "Output tok/s", "Total tok/s", "$ / M output tokens", "$ / M tokens"], rows,
                     ["l", "l", "r", "r", "r", "r"])
