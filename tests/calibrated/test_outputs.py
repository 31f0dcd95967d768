"""A calibrated run as cardgen diff and the site show it: a predicted figure says so, a predicted point is hollow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cardgen.diff import format_diff
from cardgen.diff.compute import diff_samples
from cardgen.diff.format import diff_json
from cardgen.diff.sample import bootstrap_digests, run_sample
from cardgen.site import charts
from cardgen.site.compare import interactivity_charts, run_curves

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


def _sample(analysis, path):
    return run_sample(analysis.summary, bootstrap_digests(analysis), path=path)


def test_diff_says_when_a_figure_it_compares_was_predicted(unknown):
    truth, calibrated = unknown.analysis("truth"), unknown.analysis("calibrated")
    d = diff_samples(_sample(truth, "A"), _sample(calibrated, "B"), threshold=0.05)
    predicted = {x.scenario for x in calibrated.summary.scenarios if x.basis == "predicted"}
    flagged = {p.scenario_b for p in d.points if all(f.predicted == "B" for f in p.figures)}
    clean = {p.scenario_b for p in d.points if not any(f.predicted for f in p.figures)}
    assert flagged and flagged <= predicted and not clean & predicted
    assert all(f.ci_low is None for p in d.points if p.scenario_b in flagged for f in p.figures)
    text = format_diff(d)
    assert "predicted in B" in text and "calibrated:" in text.splitlines()[1]
    data = diff_json(d)
    assert set(data["b"]["predicted_points"]) == predicted
    assert any(f["predicted"] == "B" for p in data["points"] for f in p["figures"])
    reverse = diff_samples(_sample(calibrated, "A"), _sample(truth, "B"), threshold=0.05)
    assert any(f.predicted == "A" for p in reverse.points for f in p.figures)


def test_the_site_draws_predicted_points_hollow(unknown):
    calibrated = unknown.analysis("calibrated").summary
    curves = replace(run_curves(calibrated, label="calibrated", href="run/"), modelled=False)  # as against a real
    # server: the run's own line solid, only its predicted points hollow
    chart = interactivity_charts([curves])[0]
    points = [p for s in chart.series for p in s.points]
    hollow = [p for p in points if p.hollow]
    assert hollow and len(hollow) < len(points)  # predicted hollow, measured filled
    assert all("(predicted)" in p.title for p in hollow) and not any("(predicted)" in p.title for p in points
                                                                       if not p.hollow)
    svg = charts.chart_svg(chart)
    assert svg.count('r="4" stroke-width="1.5" fill="#ffffff"') == len(hollow) and "Hollow markers: points a calibrated run predicted" in svg
    truth = run_curves(unknown.analysis("truth").summary, label="truth", href="run/")
    assert not any(p.hollow for s in interactivity_charts([truth])[0].series for p in s.points)
