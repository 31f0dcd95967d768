"""Figures are tested through the data they plot."""

from __future__ import annotations

import numpy as np
import pytest
from simruns import synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.figures import data
from cardgen.kinds.closed.figures import pair_panels, total_throughput


@pytest.fixture(scope="module")
def analysis():
    return analyse(synthetic_run()[0])


def by_name(analysis):
    return {s.scenario: s for s in analysis.summary.scenarios}


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


def test_points_that_were_not_run_are_in_no_figure(analysis):
    """A skipped point keeps its scenario row but plots nothing: no x without a y."""
    skipped = by_name(analysis)["closed-in1024-out128-p10"].model_copy(deep=True)
    skipped.scenario = "closed-in1024-out128-p16"
    skipped.parallel, skipped.stop = 16, "skipped"
    for name in ("requests", "failed"):
        setattr(skipped, name, 0)
    scenarios = [*analysis.summary.scenarios, skipped]
    (long,) = [line for line in total_throughput(scenarios) if line.label == "1024 in / 128 out"]
    assert long.x.tolist() == [1, 4, 10]
    panels = {p.pair: p for p in pair_panels(scenarios)}
    assert panels[(1024, 128)].parallel.tolist() == [1, 4, 10]
    assert all("16" not in bars.labels for bars in data.latency_percentiles(scenarios))


def test_pareto_front_keeps_the_points_nothing_beats():
    # (speed per user, throughput): both higher is better
    front = data.pareto_front([80, 70, 60, 65, 50], [100, 300, 500, 250, 500])
    assert front.tolist() == [True, True, True, False, False]  # 65/250 loses to 70/300; 50/500 to 60/500
    # equal points do not dominate each other; a single point is its own front
    assert data.pareto_front([1, 1], [2, 2]).tolist() == [True, True]
    assert data.pareto_front([3.0], [4.0]).tolist() == [True]
    # a point better on one axis only stays
    assert data.pareto_front([1, 2], [2, 1]).tolist() == [True, True]
    # a point with a missing coordinate is never on the front and beats nothing
    assert data.pareto_front([1, np.nan, 2], [5, 9, 1]).tolist() == [True, False, True]
    assert data.pareto_front([1, 2], [np.nan, 1]).tolist() == [False, True]
    # lower is better on x (TTFT): the slow-to-start point with less throughput is dominated
    assert data.pareto_front([0.1, 0.5, 0.3], [100, 90, 300], x_higher=False).tolist() == [True, False, True]
    assert data.pareto_front([0.1, 0.5, 0.3], [100, 90, 300]).tolist() == [False, True, True]


def test_throughput_interactivity_one_point_per_parallel_count(analysis):
    curves = {c.pair: c for c in data.throughput_interactivity(analysis.summary.scenarios, gpus=2)}
    c = curves[(1024, 128)]
    s = by_name(analysis)
    points = [s[f"closed-in1024-out128-p{p}"] for p in (1, 4, 10)]
    assert c.parallel.tolist() == [1, 4, 10]
    assert c.tok_s_per_user.tolist() == [p.decode_tok_s.p50 for p in points]
    assert c.ttft_s.tolist() == [p.ttft_s.p50 for p in points]
    assert c.tok_s_per_gpu.tolist() == pytest.approx([p.output_tok_s / 2 for p in points])  # two GPUs share it
    # more users: more throughput, less speed each and a longer TTFT: every point is a trade-off
    assert c.front_user.all() and c.front_ttft.all()
    one = data.throughput_interactivity(analysis.summary.scenarios, gpus=None)[0]
    assert one.tok_s_per_gpu.tolist() == pytest.approx(
        [s[f"closed-in128-out32-p{p}"].output_tok_s for p in (1, 4, 10)])


def test_a_point_that_gives_up_both_is_off_the_front(analysis):
    """A parallel count that lost throughput and speed per user (past saturation) is dominated."""
    s = by_name(analysis)
    worse = s["closed-in1024-out128-p10"].model_copy(deep=True)
    worse.scenario, worse.parallel = "closed-in1024-out128-p16", 16
    worse.output_tok_s = s["closed-in1024-out128-p4"].output_tok_s * 0.9
    scenarios = [*analysis.summary.scenarios, worse]
    c = {c.pair: c for c in data.throughput_interactivity(scenarios, gpus=1)}[(1024, 128)]
    assert c.parallel.tolist() == [1, 4, 10, 16]
    assert c.front_user.tolist() == [True, True, True, False]
    assert c.front_ttft.tolist() == [True, True, True, False]
