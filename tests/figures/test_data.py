"""Figures are tested through the data they plot."""

from __future__ import annotations

import numpy as np
import pytest
from simruns import synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.figures import data


@pytest.fixture(scope="module")
def analysis():
    return analyse(synthetic_run()[0])


def by_name(analysis):
    return {s.scenario: s for s in analysis.summary.scenarios}


def test_total_throughput_one_line_per_pair(analysis):
    lines = data.total_throughput(analysis.summary.scenarios)
    assert [line.label for line in lines] == ["128 in / 32 out", "1024 in / 128 out"]
    s = by_name(analysis)
    long = lines[1]
    assert long.x.tolist() == [1, 4, 10]
    assert long.y.tolist() == [s[f"closed-in1024-out128-p{p}"].output_tok_s for p in (1, 4, 10)]
    assert np.all(np.diff(long.y) > 0)  # more parallel requests, more total throughput


def test_pair_panels_median_and_band(analysis):
    panels = {p.pair: p for p in data.pair_panels(analysis.summary.scenarios)}
    p = panels[(1024, 128)]
    s = by_name(analysis)["closed-in1024-out128-p10"]
    assert p.speed.y[-1] == s.speed_from_start_tok_s.p50
    assert p.speed.low[-1] == s.speed_from_start_tok_s.p25 and p.speed.high[-1] == s.speed_from_start_tok_s.p75
    assert p.ttft.y[-1] == s.ttft_s.p50
    assert p.kv_usage_pct[-1] == pytest.approx(100 * s.kv_usage_max)
    assert np.all(p.speed.low <= p.speed.y) and np.all(p.speed.y <= p.speed.high)
    assert np.all(np.diff(p.speed.y) < 0)  # per-request speed falls as parallelism grows


def test_ingestion_points_and_fit_line(analysis):
    plot = data.ingestion(analysis.ingestion)
    assert len(plot.prompt_tokens) == len(plot.ttft_s) == len(plot.inlier) == 18
    fit = analysis.summary.ingestion
    assert plot.line_x.tolist() == [0.0, 4000.0]
    assert plot.line_y[1] == pytest.approx(fit.intercept_s + 4000 * fit.slope_s_per_token)
    assert "tok/s" in plot.label


def test_timeline_relative_to_first_request(analysis):
    tl = data.timeline(analysis.timeseries, analysis.summary.scenarios)
    assert tl.scenario_starts_s[0] == 0.0
    assert len(tl.t_s) == len(tl.kv_usage_pct) == len(tl.running) == len(tl.waiting)
    assert 0 <= np.nanmin(tl.kv_usage_pct) and np.nanmax(tl.kv_usage_pct) <= 100
    assert np.nanmax(tl.running) >= 10
    assert data.timeline(analysis.timeseries.iloc[0:0], analysis.summary.scenarios) is None


def test_throughput_latency_lines(analysis):
    lines = data.throughput_latency(analysis.summary.scenarios)
    labels = [line.label for line in lines]
    assert labels == ["128 in / 32 out, closed loop", "1024 in / 128 out, closed loop", "256 in / 32 out, open loop"]
    s = by_name(analysis)
    assert lines[2].x.tolist() == [s[f"open-in256-out32-r{r}"].req_s for r in ("2", "8", "inf")]
    assert lines[2].y.tolist() == [s[f"open-in256-out32-r{r}"].e2e_s.p50 for r in ("2", "8", "inf")]


def test_latency_percentile_bars(analysis):
    groups = data.latency_percentiles(analysis.summary.scenarios)
    assert [g.title for g in groups][-1] == "256 in / 32 out, open loop"
    assert groups[-1].labels == ["2/s", "8/s", "inf"]
    for g in groups:
        assert np.all(g.p50 <= g.p90) and np.all(g.p90 <= g.p95)


def test_no_closed_points_no_lines(analysis):
    only_open = [s for s in analysis.summary.scenarios if s.kind == "open"]
    assert data.total_throughput(only_open) == [] and data.pair_panels(only_open) == []


def test_points_that_were_not_run_are_in_no_figure(analysis):
    """A skipped point keeps its scenario row but plots nothing: no x without a y."""
    skipped = by_name(analysis)["closed-in1024-out128-p10"].model_copy(deep=True)
    skipped.scenario = "closed-in1024-out128-p16"
    skipped.parallel, skipped.stop = 16, "skipped"
    for name in ("requests", "failed"):
        setattr(skipped, name, 0)
    scenarios = [*analysis.summary.scenarios, skipped]
    (long,) = [line for line in data.total_throughput(scenarios) if line.label == "1024 in / 128 out"]
    assert long.x.tolist() == [1, 4, 10]
    panels = {p.pair: p for p in data.pair_panels(scenarios)}
    assert panels[(1024, 128)].parallel.tolist() == [1, 4, 10]
    assert all("16" not in bars.labels for bars in data.latency_percentiles(scenarios))
