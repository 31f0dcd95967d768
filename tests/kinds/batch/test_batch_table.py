"""The batch kind's analysis (cardgen/kinds/batch/analysis.py): TGI's batch table, saved as summary.json's
``kinds.batch`` and written as tables/batch.json and .csv from it; each batch point's precision; and what a run
without a batch sweep says it lacks."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from simruns import synthetic_run

from cardgen.analysis import analyse
from cardgen.analysis.analyse import write_analysis
from cardgen.kinds.batch.analysis import BatchTable, batch_runs, table_frame
from cardgen.precision import mean_interval, t975

BATCH_SUITE = """
name: batches
scenarios:
  - kind: batch
    prompt_tokens: 128
    output_tokens: 16
    batch_sizes: [2, 4]
    runs: 4
"""


@pytest.fixture(scope="module")
def small_run():
    """The default synthetic run (every scenario kind), analysed."""
    data, truth = synthetic_run()
    return analyse(data), truth, data


@pytest.fixture(scope="module")
def batch_run():
    data, _ = synthetic_run(suite=BATCH_SUITE)
    return data, analyse(data)


def by_name(summary):
    return {s.scenario: s for s in summary.scenarios}


def test_batch_table_in_tgi_form(small_run):
    analysis, truth, _ = small_run
    batch = analysis.tables["batch"]
    assert list(batch.columns) == ["Step", "Metric", "Unit", "Batch Size", "Average", "Lowest", "Highest", "p50",
                                   "p90", "p99", "Runs", "Average CI low", "Average CI high"]
    assert list(dict.fromkeys(batch["Step"])) == ["Prefill", "Decode (token)", "Decode (total)", "Decode"]
    assert sorted(set(batch["Batch Size"])) == [1, 2, 4, 8]
    assert (batch["Runs"] == 3).all()  # the warm-up run is left out
    assert ((batch["Lowest"] <= batch["p50"]) & (batch["p50"] <= batch["Highest"])).all()
    decode = batch[(batch["Step"] == "Decode (token)") & (batch["Batch Size"] == 1)].iloc[0]
    step_ms = (truth.server.step_overhead_s + truth.server.per_seq_s) * 1000
    assert decode["p50"] == pytest.approx(step_ms, rel=0.05)
    tput = batch[(batch["Step"] == "Decode") & (batch["Metric"] == "throughput")]
    assert tput["Average"].is_monotonic_increasing  # batching raises decode throughput


def test_the_table_is_the_kinds_result_in_summary_json_and_its_files(small_run, tmp_path):
    analysis, _, _ = small_run
    saved = analysis.summary.kinds["batch"]
    result = BatchTable.model_validate(saved)
    assert result.version == 1 and len(result.rows) == len(analysis.tables["batch"])
    pd.testing.assert_frame_equal(table_frame(result), analysis.tables["batch"])
    write_analysis(analysis, tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["kinds"]["batch"] == saved
    assert {"tables/batch.json", "tables/batch.csv"} <= {f"tables/{n}" for n in written["tables"]}
    loaded = pd.DataFrame.from_dict(json.loads((tmp_path / "tables" / "batch.json").read_text()))
    assert list(loaded.columns) == list(table_frame(result).columns) and len(loaded) == len(result.rows)
    combined = json.loads((tmp_path / "tables" / "benchmarking_results.json").read_text())
    assert combined["batch"] == json.loads((tmp_path / "tables" / "batch.json").read_text())


def test_batch_table_gives_each_average_its_t_interval(batch_run):
    data, analysis = batch_run
    batch = analysis.tables["batch"]
    runs = batch_runs(analysis.requests)
    for row in batch.to_dict("records"):
        column = {"Prefill latency": "prefill_ms", "Decode (token) latency": "decode_token_ms",
                  "Decode (total) latency": "decode_total_ms", "Prefill throughput": "prefill_tok_s",
                  "Decode throughput": "decode_tok_s"}[f"{row['Step']} {row['Metric']}"]
        values = runs.loc[runs["batch_size"] == row["Batch Size"], column].to_numpy(dtype=float)
        half = t975(len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
        assert row["Runs"] == len(values) == 4
        assert row["Average CI low"] == pytest.approx(row["Average"] - half)
        assert row["Average CI high"] == pytest.approx(row["Average"] + half)
    for name in ("batch-in128-out16-b2", "batch-in128-out16-b4"):
        p = by_name(analysis.summary)[name].precision
        decode = runs.loc[runs["scenario"] == name, "decode_speed_tok_s"]
        assert p.method == "mean of rounds"
        assert p.decode == pytest.approx(mean_interval(decode.to_numpy(dtype=float)).relative)
        assert p.batches == 4


CLOSED_SUITE = """
name: closed
scenarios:
  - {kind: closed, prompt_tokens: 128, output_tokens: 16, parallel: [1, 2], min_requests: 4, max_requests: 8}
"""


def test_a_run_without_a_batch_sweep_says_so_and_has_no_table(small_run):
    _, _, data = small_run
    unsent = dataclasses.replace(data, requests=[r for r in data.requests if r.kind != "batch"])  # points, no rounds
    without, _ = synthetic_run(suite=CLOSED_SUITE)  # no batch point at all
    for run in (unsent, without):
        analysis = analyse(run)
        assert "no batch sweep: no batch table" in analysis.summary.missing
        assert "batch" not in analysis.summary.kinds and "batch" not in analysis.tables
        assert all(s.precision is None or s.precision.method != "mean of rounds" for s in analysis.summary.scenarios)
