"""The batch table (FlexGen's layout): each step's latency and throughput per batch size."""

from __future__ import annotations

import pandas as pd

from cardgen import numbers as fmt
from cardgen.card.table import TableView


def batch_table(df: pd.DataFrame, metric: str) -> TableView | None:
    if df is None or df.empty:
        return None
    part = df[df["Metric"] == metric]
    if part.empty:
        return None
    rows = []
    last_step = None
    for rec in part.to_dict("records"):
        unit = " ms" if rec["Unit"] == "ms" else " tokens/s"
        step = rec["Step"] if rec["Step"] != last_step else ""
        last_step = rec["Step"]
        ci = fmt.interval(rec.get("Average CI low"), rec.get("Average CI high"))
        ci = ci if ci == fmt.DASH else ci + unit
        rows.append([step, str(rec["Batch Size"]), fmt.sig(rec["Average"]) + unit, ci]
                    + [fmt.sig(rec[c]) + unit for c in ("Lowest", "Highest", "p50", "p90", "p99")]
                    + [str(rec["Runs"])])
    return TableView(["Step", "Batch Size", "Average", "95 % CI of the average", "Lowest", "Highest", "p50", "p90",
                      "p99", "Runs"], rows, ["l"] + ["r"] * 9)
