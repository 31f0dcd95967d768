"""Scale tables and curves across runs of one model, read tolerantly from summaries."""

from __future__ import annotations

import datetime as dt

import pytest

from cardgen.schemas.summary import Distribution, Headline, ScenarioSummary, Summary
from cardgen.site.compare import curve_sets, draw_curves, headline_table, scenario_tables
from cardgen.site.mdtext import demote_headings
from cardgen.site.pages import fmt_auto
from cardgen.site.sample import sample_summary


def _two():
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    base = sample_summary(model="m", gpu="A", engine="vllm", modelled=False, started=when, speed=1.0)
    fast = sample_summary(model="m", gpu="B", engine="vllm", modelled=False, started=when, speed=2.0)
    return base, fast


def test_headline_scale_is_run_over_baseline():
    base, fast = _two()
    table = headline_table([base, fast])
    row = table.rows.index("Prompt ingestion (tok/s)")
    assert table.values[row] == pytest.approx([13500.0, 27000.0])
    assert table.scale(row, 1) == pytest.approx(2.0)


def test_missing_figures_are_left_out_not_invented():
    base, _ = _two()
    empty = Summary(model="m", headline=Headline(prompt_ingestion_tok_s=None))
    table = headline_table([base, empty])
    assert all(values[1] is None for values in table.values)
    assert table.scale(0, 1) is None
    assert scenario_tables([base, empty]) == [] and curve_sets([base, empty]) == []


def test_scenario_points_are_matched_by_parameters():
    base, fast = _two()
    odd = ScenarioSummary(
        scenario="x", kind="closed", prompt_tokens=4096, output_tokens=128, parallel=3, output_tok_s=1.0
    )
    fast.scenarios.append(odd)  # only one run has this point: not compared
    tables = {t.title: t for t in scenario_tables([base, fast])}
    throughput = tables["Total output throughput (tok/s)"]
    assert len(throughput.rows) == 8 + 1 and not any("4096" in r for r in throughput.rows)  # closed + open
    i = throughput.rows.index("closed · 1024 → 128 tokens · 10 parallel")
    assert throughput.scale(i, 1) == pytest.approx(2.0, rel=1e-4)  # rendered runs: times rounded in the summary
    ttft = tables["Time to first token, median (s)"]
    assert ttft.scale(i, 1) == pytest.approx(0.5, rel=1e-4)


def test_plain_dict_scenarios_with_distributions_are_read():
    a = Summary.model_validate(
        {
            "model": "m",
            "scenarios": [
                {
                    "scenario": "s",
                    "kind": "closed",
                    "prompt_tokens": 32,
                    "output_tokens": 16,
                    "parallel": 1,
                    "ttft_s": {"p50": 0.1},
                }
            ],
        }
    )
    b = Summary.model_validate(
        {
            "model": "m",
            "scenarios": [
                {
                    "scenario": "s",
                    "kind": "closed",
                    "prompt_tokens": 32,
                    "output_tokens": 16,
                    "parallel": 1,
                    "ttft_s": Distribution(p50=0.3).model_dump(),
                }
            ],
        }
    )
    (table,) = scenario_tables([a, b])
    assert abs(table.scale(0, 1) - 3.0) < 1e-9


def test_curves_overlay_runs_per_pair():
    from matplotlib.figure import Figure

    base, fast = _two()
    sets = curve_sets([base, fast])
    assert {(s.prompt_tokens, s.output_tokens) for s in sets} == {(32, 16), (1024, 128)}
    label, curves = sets[0].panels[0]
    assert [c.run for c in curves] == [0, 1] and curves[0].xs == [1, 4, 10, 16]
    ax = Figure().subplots()
    draw_curves(ax, label, curves, ["#1 $A$", "#2 B"])
    assert len(ax.lines) == 2 and ax.get_xlabel() == "parallel requests"
    assert [line.get_label() for line in ax.lines] == [r"#1 \$A\$", "#2 B"]  # no mathtext from names
    assert [line.get_color() for line in ax.lines] == ["C0", "C1"]


def test_formatting_helpers():
    assert [fmt_auto(v) for v in (None, 13582.4, 41.94, 0.0871)] == ["—", "13,582", "41.9", "0.0871"]
    text = "# Title\n\n## Sub\n\n```\n# not a heading\n```\n"
    assert demote_headings(text) == "### Title\n\n#### Sub\n\n```\n# not a heading\n```\n"


def test_points_that_were_not_run_are_not_compared():
    base, fast = _two()
    skipped = ScenarioSummary(scenario="closed-in1024-out128-p64", kind="closed", prompt_tokens=1024,
                              output_tokens=128, parallel=64, requests=0, stop="skipped")
    for run in (base, fast):
        run.scenarios.append(skipped.model_copy())
    tables = {t.title: t for t in scenario_tables([base, fast])}
    assert not any("64 parallel" in r for r in tables["Total output throughput (tok/s)"].rows)
