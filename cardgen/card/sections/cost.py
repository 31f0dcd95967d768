"""The card's cost: what a million tokens cost at every closed- and open-loop point, from run.json's price per
GPU-hour (:mod:`cardgen.analysis.cost`), and the energy per output token where the GPUs' energy was measured."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.sections.point_text import load_text
from cardgen.card.table import TableView
from cardgen.kinds import kind_of
from cardgen.schemas.summary import Summary


def cost_table(s: Summary) -> TableView | None:
    """Per closed- and open-loop point that ran: throughput, cost per million tokens (with a price) and energy per
    output token (where measured); None when the run has neither."""
    points = [x for x in s.scenarios if kind_of(x).serving_load and x.requests]
    priced = s.price_per_gpu_hour is not None
    energy = any(x.j_per_output_token is not None for x in points)
    if not points or not (priced or energy):
        return None
    columns = ["Point", "Load", "Output tok/s", "Total tok/s"]
    columns += ["$ / M output tokens", "$ / M tokens"] if priced else []
    columns += ["J / output token", "Output tokens / J"] if energy else []
    rows = []
    for x in points:
        row = [x.scenario, load_text(x), fmt.sig(x.output_tok_s), fmt.sig(x.total_tok_s)]
        if priced:
            row += [fmt.usd(x.usd_per_million_output_tokens), fmt.usd(x.usd_per_million_tokens)]
        if energy:
            j = x.j_per_output_token
            row += [fmt.sig(j), fmt.sig(1 / j) if j else fmt.DASH]
        rows.append(row)
    return TableView(columns, rows, ["l", "l"] + ["r"] * (len(columns) - 2))
