"""Throughput against interactivity, point by point, with the Pareto fronts marked (the figure's data)."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.figures.data import throughput_interactivity
from cardgen.schemas.summary import Summary


def interactivity_table(s: Summary) -> TableView | None:
    """Throughput against interactivity, point by point (the figure's data), with the Pareto fronts marked."""
    rows = []
    for c in throughput_interactivity(s.scenarios, gpus=s.gpu_count):
        for i, n in enumerate(c.parallel):
            rows.append([f"{c.pair[0]} / {c.pair[1]}", f"{n:.0f}", fmt.sig(float(c.tok_s_per_user[i])),
                         fmt.ms(float(c.ttft_s[i])), fmt.sig(float(c.tok_s_per_gpu[i])),
                         "yes" if c.front_user[i] else "no", "yes" if c.front_ttft[i] else "no"])
    if not rows:
        return None
    return TableView(["Prompt / output tokens", "Parallel", "Tokens/s per user", "TTFT p50", "Output tokens/s per GPU",
                      "Front (per user)", "Front (TTFT)"], rows, ["l", "r", "r", "r", "r", "l", "l"])
