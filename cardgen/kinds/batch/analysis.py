"""The batch table of a run (pure): the kind's analysis (:data:`ANALYSIS`, saved as ``summary.json``
``kinds.batch``, and as ``tables/batch.json`` and ``.csv``).

TGI's batch table, per batch size: prefill latency, decode latency per token and in total (ms), prefill and
decode throughput (tok/s); average, lowest, highest, p50, p90, p99 over the repeated runs (a run: one round of
B requests sent at once, warm-up rounds left out), and the 95 % t interval of the average
(:func:`cardgen.precision.mean_interval`: runs are independent repeats). A calibrated run's predicted rounds are
counted with the measured ones. A point's precision is the interval of the mean, over its runs, of each run's
mean decode speed per request (what its precision target is judged on).

What it saves (:class:`BatchTable`) the card reads back (:mod:`cardgen.kinds.batch.section`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.precision import mean_interval
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult, PointPrecision, Summary

TABLE = "batch"  # tables/batch.json and tables/batch.csv

STEPS = (  # (step, metric, unit, run column)
    ("Prefill", "latency", "ms", "prefill_ms"),
    ("Decode (token)", "latency", "ms", "decode_token_ms"),
    ("Decode (total)", "latency", "ms", "decode_total_ms"),
    ("Prefill", "throughput", "tokens/s", "prefill_tok_s"),
    ("Decode", "throughput", "tokens/s", "decode_tok_s"),
)


class BatchRow(Saved):
    """One step's figure at one batch size, over the runs of that size."""

    step: str  # Prefill | Decode (token) | Decode (total) | Decode
    metric: str  # latency | throughput
    unit: str  # ms | tokens/s
    batch_size: int
    average: float
    lowest: float
    highest: float
    p50: float
    p90: float
    p99: float
    runs: int
    average_ci_low: float | None = None  # the average's 95 % t interval (None with one run)
    average_ci_high: float | None = None


class BatchTable(KindResult):
    """The batch table, long form: one row per (step, batch size), steps in :data:`STEPS`' order, sizes rising."""

    rows: list[BatchRow]


# the table file's columns (TGI's names) and the row field each holds
COLUMNS = {"Step": "step", "Metric": "metric", "Unit": "unit", "Batch Size": "batch_size", "Average": "average",
           "Lowest": "lowest", "Highest": "highest", "p50": "p50", "p90": "p90", "p99": "p99", "Runs": "runs",
           "Average CI low": "average_ci_low", "Average CI high": "average_ci_high"}


def batch_runs(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the batch sweep (point, repeat): its prefill and decode figures."""
    if requests.empty:
        return pd.DataFrame()
    rows = requests[~requests["warmup"] & requests["ok"]]
    runs = []
    for (scenario, _repeat), g in rows.groupby(["scenario", "repeat"], sort=False, dropna=False):
        prefill_s = float(g["first_token_at"].max() - g["sent_at"].min())
        decode_total_s = float((g["e2e_s"] - g["ttft_s"]).mean())
        steps = float(g["output_tokens"].mean() - 1)
        runs.append({
            "scenario": scenario, "batch_size": int(g["parallel"].max()) if g["parallel"].notna().any() else len(g),
            "prefill_ms": prefill_s * 1000,
            "decode_token_ms": float(g["tpot_s"].mean()) * 1000,
            "decode_total_ms": decode_total_s * 1000,
            "prefill_tok_s": float(g["prompt_tokens"].sum()) / prefill_s if prefill_s > 0 else np.nan,
            "decode_tok_s": len(g) * steps / decode_total_s if decode_total_s > 0 and steps > 0 else np.nan,
            "decode_speed_tok_s": float(g["decode_tok_s"].mean()),  # per request, averaged: the stopping figure
        })
    return pd.DataFrame(runs)


def batch_rows(requests: pd.DataFrame) -> list[BatchRow]:
    """The table's rows over the batch points' request rows."""
    runs = batch_runs(requests)
    rows: list[BatchRow] = []
    if runs.empty:
        return rows
    for step, metric, unit, column in STEPS:
        for batch_size, g in runs.groupby("batch_size", sort=True):
            v = g[column].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if len(v) == 0:
                continue
            p50, p90, p99 = np.percentile(v, [50, 90, 99])
            interval = mean_interval(v)
            rows.append(BatchRow(step=step, metric=metric, unit=unit, batch_size=int(batch_size),
                                 average=float(v.mean()), lowest=float(v.min()), highest=float(v.max()),
                                 p50=float(p50), p90=float(p90), p99=float(p99), runs=len(v),
                                 average_ci_low=interval.low if interval else None,
                                 average_ci_high=interval.high if interval else None))
    return rows


def batch_table(run: KindRun) -> BatchTable | None:
    """The run's batch table, measured and predicted rounds together (None: no round succeeded)."""
    requests = pd.concat([run.requests, run.predicted]) if len(run.predicted) else run.requests
    rows = batch_rows(requests)
    return BatchTable(rows=rows) if rows else None


def batch_precision(run: KindRun) -> dict[str, PointPrecision]:
    """Per point: the relative 95 % half-width of the mean, over its measured runs, of each run's mean decode speed
    per request."""
    runs = batch_runs(run.requests)
    out: dict[str, PointPrecision] = {}
    if runs.empty:
        return out
    for scenario, g in runs.groupby("scenario", sort=False):
        interval = mean_interval(g["decode_speed_tok_s"].to_numpy(dtype=float))
        rel = interval.relative if interval is not None else None
        out[str(scenario)] = PointPrecision(method="mean of rounds",
                                            decode=rel if rel is not None and np.isfinite(rel) else None,
                                            batches=len(g))
    return out


def table_frame(result: BatchTable) -> pd.DataFrame:
    """The table as its file holds it: TGI's column names (:data:`COLUMNS`), a row per (step, batch size)."""
    return pd.DataFrame([{column: getattr(row, name) for column, name in COLUMNS.items()} for row in result.rows])


def tables(result: BatchTable, s: Summary) -> Mapping[str, pd.DataFrame]:
    return {TABLE: table_frame(result)}


ANALYSIS = KindAnalysis(result=BatchTable, analyse=batch_table, precision=batch_precision, tables=tables,
                        absent="no batch sweep: no batch table")
