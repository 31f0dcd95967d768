from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from cardgen.analysis.tables import COMBINED_JSON, write_tables

SERVING_COLUMNS = ["Test name", "GPU", "Rate (req/s)", "# of req.", "Tput (req/s)", "Output Tput (tok/s)",
                   "Total Tput (tok/s)", "Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)", "Mean TPOT (ms)",
                   "Median TPOT (ms)", "P99 TPOT (ms)", "Mean ITL (ms)", "Median ITL (ms)", "P99 ITL (ms)"]


def test_serving_table_has_vllm_columns_per_rate(small_run):
    analysis, _ = small_run
    serving = analysis.tables["serving"]
    assert set(SERVING_COLUMNS) <= set(serving.columns)
    assert list(serving["Rate (req/s)"]) == ["2", "8", "inf"]
    by = {s.scenario: s for s in analysis.summary.scenarios}
    row = serving.iloc[0]
    assert row["Median TTFT (ms)"] == pytest.approx(by[row["Test name"]].ttft_s.p50 * 1000)
    assert row["Output Tput (tok/s)"] == pytest.approx(by[row["Test name"]].output_tok_s)


def test_fastgen_and_scale_tables(small_run):
    analysis, _ = small_run
    fg = analysis.tables["fastgen"]
    assert {"Throughput (req/s)", "Effective throughput (req/s)", "E2E p50 (s)", "E2E p90 (s)", "E2E p95 (s)"} <= set(
        fg.columns)
    assert set(fg["Kind"]) == {"closed", "open"}
    assert (fg["Effective throughput (req/s)"] <= fg["Throughput (req/s)"] + 1e-12).all()
    scale = analysis.tables["scale"]
    assert list(scale["Parallel"]) == [1, 4, 10, 1, 4, 10]
    assert scale["Peak KV (tokens)"].max() <= analysis.summary.kv_cache_tokens


def test_written_tables_load_into_pandas(small_run, tmp_path):
    analysis, _ = small_run
    names = write_tables(analysis.tables, tmp_path)
    assert COMBINED_JSON in names and "serving.csv" in names and "batch.json" in names
    for name, df in analysis.tables.items():
        loaded = pd.DataFrame.from_dict(json.loads((tmp_path / f"{name}.json").read_text()))
        assert list(loaded.columns) == list(df.columns)
        assert len(loaded) == len(df)
        csv = pd.read_csv(io.StringIO((tmp_path / f"{name}.csv").read_text()))
        assert list(csv.columns) == list(df.columns)
    combined = json.loads((tmp_path / COMBINED_JSON).read_text())
    serving = pd.DataFrame.from_dict(combined["serving"])
    assert serving["Tput (req/s)"].tolist() == pytest.approx(analysis.tables["serving"]["Tput (req/s)"].tolist())


def test_empty_tables_write_only_the_combined_file(tmp_path):
    assert write_tables({"serving": pd.DataFrame()}, tmp_path) == [COMBINED_JSON]
    assert json.loads((tmp_path / COMBINED_JSON).read_text()) == {}
