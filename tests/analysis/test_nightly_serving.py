"""vLLM's nightly serving table (seed 003's layout) from a run whose open-loop rates drew ShareGPT requests,
its JSON, the lengths sent, and the card's section."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse, write_analysis
from cardgen.analysis.rundata import load_run
from cardgen.analysis.serving import NIGHTLY_COLUMNS, NIGHTLY_JSON, nightly_test_name
from cardgen.card.render import render_card
from cardgen.sim.config import SimConfig
from cardgen.suite import parse_suite

# seed 003's columns, copied from the nightly page
SEED_003 = ["Test name", "GPU", "# of req.", "Tput (req/s)", "Output Tput (tok/s)", "Total Tput (tok/s)",
            "Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)", "Mean TPOT (ms)", "Median TPOT (ms)",
            "P99 TPOT (ms)", "Mean ITL (ms)", "Median ITL (ms)", "P99 ITL (ms)"]

SUITE = """name: sharegpt-small
scenarios:
  - kind: open
    name: serving_sharegpt
    dataset: sharegpt
    num_requests: 40
    rates: [4, 16, inf]
  - kind: open
    name: fixed
    prompt_tokens: 64
    output_tokens: 16
    rates: [8]
    num_requests: 10
"""


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    simulate(parse_suite(SUITE, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"), run_dir=run_dir)
    analysis = analyse(load_run(run_dir))
    write_analysis(analysis, run_dir)
    return run_dir, analysis


def test_the_table_has_seed_003s_columns_exactly_one_row_per_rate(analysed):
    _, analysis = analysed
    table = analysis.workloads.nightly
    assert list(NIGHTLY_COLUMNS) == SEED_003 == list(table.columns)
    assert list(table["Test name"]) == ["serving_sharegpt_qps_04", "serving_sharegpt_qps_16",
                                        "serving_sharegpt_qps_inf"]  # the fixed-length rate is not a dataset test
    assert set(table["# of req."]) == {40} and set(table["GPU"]) == {"A100-80GB x 1 (modelled)"}
    by_name = {s.scenario: s for s in analysis.summary.scenarios}
    row = table.iloc[0]
    s = by_name["open-sharegpt-r4"]
    assert row["Tput (req/s)"] == s.req_s and row["Total Tput (tok/s)"] > row["Output Tput (tok/s)"] > 0
    assert row["Median ITL (ms)"] == pytest.approx(s.itl_s.p50 * 1000)
    assert table["Mean TTFT (ms)"].iloc[-1] > table["Mean TTFT (ms)"].iloc[0]  # all at once queues


def test_its_json_loads_into_pandas_as_the_nightlys_page_says(analysed):
    run_dir, analysis = analysed
    results = json.loads((run_dir / "tables" / NIGHTLY_JSON).read_text())
    assert results["latency"] == {} and results["throughput"] == {}
    serving = pd.DataFrame.from_dict(results["serving"])
    assert list(serving.columns) == SEED_003 and len(serving) == 3
    assert NIGHTLY_JSON in analysis.summary.tables


def test_nightly_test_names_follow_the_nightly():
    assert [nightly_test_name("g", r) for r in (1, 4, 16, math.inf, 2.5)] == [
        "g_qps_01", "g_qps_04", "g_qps_16", "g_qps_inf", "g_qps_2.5"]


def test_the_lengths_sent_are_the_servers_counts(analysed):
    _, analysis = analysed
    hist = analysis.workloads.lengths["serving_sharegpt"]
    assert hist.requests == 120 and sum(hist.prompts) == sum(hist.outputs) == 120
    rows = analysis.requests[analysis.requests["group"] == "serving_sharegpt"]
    assert hist.output_stats["max"] == rows["output_tokens"].max()


def test_the_card_prints_the_table_lengths_and_json(analysed):
    _, analysis = analysed
    card = render_card(analysis, date="2026-11-22")
    section = card.split("## Serving tests on a dataset")[1].split("\n## ")[0]
    assert "| " + " | ".join(SEED_003) + " |" in section
    assert "40 prompts drawn from ShareGPT with seed 0" in section and "Lengths actually sent" in section
    block = section.split("```json\n")[1].split("\n```")[0]
    assert list(pd.DataFrame.from_dict(json.loads(block)["serving"]).columns) == SEED_003
