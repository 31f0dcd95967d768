"""The batch table's part of the card (:data:`SECTION`): "Batch table" after the server's extras (reasoning,
speculative decoding, LoRA adapters), each step's latency and throughput per batch size in FlexGen's layout
(``section.md.j2``); shown for every run, saying so where the run has no batch sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.table import TableView
from cardgen.kinds.batch.analysis import BatchTable
from cardgen.schemas.summary import Summary

COLUMNS = ["Step", "Batch Size", "Average", "95 % CI of the average", "Lowest", "Highest", "p50", "p90", "p99", "Runs"]


def step_table(result: BatchTable | None, metric: str) -> TableView | None:
    """The rows of one metric (latency or throughput), each step named on its first row only."""
    part = [r for r in result.rows if r.metric == metric] if result is not None else []
    if not part:
        return None
    rows = []
    last_step = None
    for r in part:
        unit = " ms" if r.unit == "ms" else " tokens/s"
        step = r.step if r.step != last_step else ""
        last_step = r.step
        ci = fmt.interval(r.average_ci_low, r.average_ci_high)
        ci = ci if ci == fmt.DASH else ci + unit
        rows.append([step, str(r.batch_size), fmt.sig(r.average) + unit, ci]
                    + [fmt.sig(x) + unit for x in (r.lowest, r.highest, r.p50, r.p90, r.p99)]
                    + [str(r.runs)])
    return TableView(COLUMNS, rows, ["l"] + ["r"] * 9)


def context(result: BatchTable | None, s: Summary) -> dict[str, Any]:
    """What ``section.md.j2`` prints (a run without the kind's result: that it has no batch sweep)."""
    return {"latency": step_table(result, "latency"), "throughput": step_table(result, "throughput")}


SECTION = KindSection(result=BatchTable, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="tables", always=True)
