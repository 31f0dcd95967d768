"""Comparing runs of one model on the site: scale tables with each ratio's significance (as cardgen diff computes
it), configurations, the curves overlaid, and the SVG charts they are drawn as."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path, PurePosixPath

import pytest

from cardgen.diff import FASTER, SLOWER, run_sample, saved_sample
from cardgen.diff.compute import FigureDiff
from cardgen.schemas.summary import Headline, ScenarioSummary, Summary
from cardgen.site import charts
from cardgen.site.compare import headline_table, interactivity_charts, run_curves, scenario_tables
from cardgen.site.mdtext import demote_headings
from cardgen.site.pages import ratio_cell
from cardgen.site.plan import plan_site
from cardgen.site.runs import SiteRun
from cardgen.site.sample import write_sample_run

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """The sample server on GPU A, and twice as fast on GPU B (80 requests a point: enough rounds for
    intervals), as the site reads them: summary.json and bootstrap.json."""
    root = tmp_path_factory.mktemp("compare")
    out = []
    for gpu, speed in (("A", 1.0), ("B", 2.0)):
        run = write_sample_run(root / gpu, model="m", gpu=gpu, speed=speed, started=WHEN, requests=80)
        out.append(saved_sample(run, Summary.model_validate_json((run / "summary.json").read_text("utf-8"))))
    return out


def test_headline_scale_is_run_over_baseline_with_its_significance(two):
    table = headline_table(two)
    row = table.rows.index("Prompt ingestion (tok/s)")
    base, fast = table.cells[row]
    assert (base.value, fast.value) == pytest.approx((13500.0, 27000.0), rel=0.01)
    assert base.diff is None and fast.diff.ratio == pytest.approx(2.0, rel=0.01)
    speed = table.cells[table.rows.index("Speed from start per request, 10 parallel, 1024 → 128 (tok/s)")][1]
    assert speed.diff.verdict == FASTER and speed.diff.ci_low > 1  # from each run's own requests
    ttft = table.cells[table.rows.index("TTFT p50, 10 parallel, 1024 → 128 (s)")][1]
    assert ttft.diff.ratio < 1 and ttft.diff.verdict == FASTER  # a lower TTFT is faster
    assert headline_table(list(reversed(two))).cells[row][1].diff.verdict == SLOWER


def test_missing_figures_are_left_out_not_invented(two):
    empty = run_sample(Summary(model="m", headline=Headline(prompt_ingestion_tok_s=None)), None)
    table = headline_table([two[0], empty])
    assert table.rows == []  # a figure only one run has is not a comparison
    assert scenario_tables([two[0], empty]) == []


def test_scenario_points_are_matched_by_parameters(two):
    base, fast = two
    odd = ScenarioSummary(scenario="x", kind="closed", prompt_tokens=4096, output_tokens=128, parallel=3,
                          output_tok_s=1.0, requests=4)
    extra = run_sample(fast.summary.model_copy(update={"scenarios": [*fast.summary.scenarios, odd]}), None)
    tables = {t.title: t for t in scenario_tables([base, extra])}
    throughput = tables["Total output throughput (tok/s)"]
    assert len(throughput.rows) == 8 + 1 and not any("4096" in r for r in throughput.rows)  # closed + open
    i = throughput.rows.index("closed · 1024 → 128 tokens · 10 parallel")
    assert throughput.cells[i][1].diff.ratio == pytest.approx(2.0, rel=1e-3)
    ttft = tables["Time to first token, median (s)"]
    assert ttft.cells[i][1].diff.ratio == pytest.approx(0.5, rel=1e-3)
    assert [r for r in throughput.rows if r.startswith("closed")] == [
        f"closed · {p} → {o} tokens · {n} parallel" for p, o in ((32, 16), (1024, 128)) for n in (1, 4, 10, 16)]


def test_points_that_were_not_run_are_not_compared(two):
    skipped = ScenarioSummary(scenario="closed-in1024-out128-p64", kind="closed", prompt_tokens=1024,
                              output_tokens=128, parallel=64, requests=0, stop="skipped")
    samples = [run_sample(s.summary.model_copy(update={"scenarios": [*s.summary.scenarios, skipped]}), None)
               for s in two]
    tables = {t.title: t for t in scenario_tables(samples)}
    assert not any("64 parallel" in r for r in tables["Total output throughput (tok/s)"].rows)


def test_ratio_cells_carry_the_significance():
    def d(verdict: str, ratio: float = 0.8, low: float | None = 0.78, high: float | None = 0.82) -> FigureDiff:
        return FigureDiff(key="k", name="n", unit="tok/s", better="higher", a=1.0, b=ratio, ratio=ratio, ci_low=low,
                          ci_high=high, interval="bootstrap", significant=None, verdict=verdict, note="too few")

    assert "▼" in ratio_cell(d("slower")) and "cardgen-worse" in ratio_cell(d("slower"))
    assert "0.780–0.820: slower" in ratio_cell(d("slower"))
    assert "▲" in ratio_cell(d("faster", 1.2, 1.1, 1.3)) and "▲" in ratio_cell(d("larger", 1.2, 1.2, 1.2))
    assert "=" in ratio_cell(d("no significant change", 1.0, 0.9, 1.1))
    unknown = ratio_cell(d("cannot tell", 1.0, None, None))
    assert "?" in unknown and "too few" in unknown
    assert ratio_cell(None).endswith(">—</td>")


def _site_run(root: Path, gpu: str, engine: str, hour: int) -> SiteRun:
    summary = Summary(model="m", gpu=gpu, engine=engine, started_at=f"2026-01-01T{hour:02d}:00:00+00:00")
    return SiteRun(run_dir=root / f"{gpu}{hour}", rel=PurePosixPath(f"{gpu}{hour}"), summary=summary, card="# c\n")


def test_compare_pages_put_configurations_side_by_side(tmp_path):
    runs = [_site_run(tmp_path, "A100", "vllm", 1), _site_run(tmp_path, "H100", "vllm", 2),
            _site_run(tmp_path, "A100", "vllm", 3), _site_run(tmp_path, "A100", "sglang", 4)]
    (group,) = plan_site(runs).models
    # the newest run of each configuration, in the order the configurations were first measured
    assert [(r.gpu, r.engine, r.run.started_at[11:13]) for r in group.compare_runs] == [
        ("A100", "vllm", "03"), ("H100", "vllm", "02"), ("A100", "sglang", "04")]
    (single,) = plan_site([runs[0], runs[2]]).models
    assert [r.run.started_at[11:13] for r in single.compare_runs] == ["01", "03"]  # one configuration: every run


def test_interactivity_curves_overlay_every_run_per_pair(two):
    curves = [run_curves(s.summary, label=f"#{i} $A$ <b>", href=f"../run{i}/index.html") for i, s in enumerate(two)]
    made = interactivity_charts(curves)
    assert [c.title for c in made][:2] == ["Throughput against interactivity, 1024 in / 128 out",
                                           "Throughput against TTFT, 1024 in / 128 out"]  # the reference pair first
    assert len(made) == 4
    chart = made[0]
    assert [s.name for s in chart.series] == ["#0 $A$ <b>", "#1 $A$ <b>"]
    fast = chart.series[1].points
    assert [p.label for p in fast] == ["1", "4", "10", "16"]
    assert fast[-1].y > chart.series[0].points[-1].y  # twice as fast: more throughput per GPU at 16 parallel
    assert any(p.strong for p in fast)  # the Pareto front is marked


def test_chart_svg_is_self_contained_and_escaped():
    pts = [charts.Point(1.0, 2.0, label="<1>", title="a & b", href="../x/index.html", key="runs/x", strong=True),
           charts.Point(3.0, 5.0), charts.Point(float("nan"), 1.0)]
    svg = charts.chart_svg(charts.Chart("T <script>", "x", "y", [charts.Series("s<i>", pts, charts.color(0),
                                                                                 hollow=True)]))
    assert svg.startswith('<div class="cardgen-chart">') and "\n" not in svg  # one raw HTML line
    assert "<script>" not in svg and "T &lt;script&gt;" in svg and "s&lt;i&gt;" in svg and "a &amp; b" in svg
    assert 'data-key="runs/x"' in svg and '<a href="../x/index.html">' in svg and 'stroke-dasharray' in svg
    assert not re.search(r"(src|href)=\"(https?:)?//", svg)
    assert svg.count('r="4"') == 2  # the point with no x is not drawn
    assert charts.chart_svg(charts.Chart("t", "x", "y", [])) == ""
    assert charts.nice_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    assert charts.nice_ticks(0.013, 0.78)[0] <= 0.013 and charts.nice_ticks(0.013, 0.78)[-1] >= 0.78


def test_headings_are_demoted():
    text = "# Title\n\n## Sub\n\n```\n# not a heading\n```\n"
    assert demote_headings(text) == "### Title\n\n#### Sub\n\n```\n# not a heading\n```\n"
