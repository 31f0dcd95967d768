"""``cardgen diff``: the verdicts on runs with known truth, the exit codes, the refusal, the KV capacity."""

from __future__ import annotations

import json

import numpy as np
import pytest
from diff_helpers import FACTOR

from cardgen.analysis import analyse, load_run
from cardgen.cli.main import main
from cardgen.diff import (
    CANNOT_TELL,
    FASTER,
    LARGER,
    NO_CHANGE,
    NO_SIGNIFICANT_CHANGE,
    SLOWER,
    SMALLER,
    bootstrap_digests,
    check_comparable,
    diff_runs,
    diff_samples,
    figure_diff,
    load_sample,
    run_sample,
    saved_sample,
    write_digests,
)
from cardgen.diff.kindparts import HIGHER, LOWER
from cardgen.diff.sample import BOUNDS, EXACT, NONE, Figure, Spread
from cardgen.errors import UsageError
from cardgen.schemas.summary import ScenarioSummary

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SPEEDS = ("prompt_ingestion_tok_s", "generation_tok_s_at_10_parallel_1024_128", "decode_tok_s_at_10_parallel_1024_128")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """``cardgen ARGS``: exit status, stdout, stderr."""
    try:
        main(list(args))
    except SystemExit as exc:
        out = capsys.readouterr()
        return int(exc.code or 0), out.out, out.err
    out = capsys.readouterr()
    return 0, out.out, out.err


@pytest.fixture(scope="module")
def same(runs):
    return diff_runs(runs.base, runs.same)


@pytest.fixture(scope="module")
def slow(runs):
    return diff_runs(runs.base, runs.slow)


def test_two_runs_of_the_same_server_show_no_significant_change(same):
    verdicts = {h.key: h.verdict for h in same.headlines}
    assert set(verdicts) == {*SPEEDS, "ttft_s_at_10_parallel_1024_128", "kv_cache_tokens"}
    assert verdicts.pop("kv_cache_tokens") == NO_CHANGE  # declared by the server, equal: exact
    assert set(verdicts.values()) == {NO_SIGNIFICANT_CHANGE}
    assert all(h.ci_low <= 1 <= h.ci_high for h in same.headlines)
    assert same.regressions == []
    # the same server's points: hardly a figure comes out significant (95 % intervals: about 1 in 20 may)
    figures = [f for p in same.points for f in p.figures if f.significant is not None]
    assert len(figures) > 30
    assert sum(f.significant for f in figures) <= 0.1 * len(figures)


def test_a_server_20_percent_slower_is_slower_with_an_interval_holding_0_8(slow):
    by = {h.key: h for h in slow.headlines}
    for key in SPEEDS:
        h = by[key]
        assert h.verdict == SLOWER, h
        assert h.ci_low <= FACTOR <= h.ci_high, h
        assert h.ci_high < 1 and h.significant
    ttft = by["ttft_s_at_10_parallel_1024_128"]  # lower is better: a larger TTFT is slower
    assert ttft.better == LOWER and ttft.ratio > 1 and ttft.verdict == SLOWER
    assert ttft.ci_low <= 1 / FACTOR <= ttft.ci_high
    assert by["kv_cache_tokens"].verdict == NO_CHANGE
    assert {h.key for h in slow.regressions} == {*SPEEDS, "ttft_s_at_10_parallel_1024_128"}
    # and the other way round: B faster than A
    faster = diff_samples(slow.b, slow.a)
    assert {h.key: h.verdict for h in faster.headlines if h.key in SPEEDS} == dict.fromkeys(SPEEDS, FASTER)
    assert faster.regressions == []


def test_point_figures_are_the_summarys_and_every_shared_point_is_compared(slow):
    a = slow.a.summary
    assert [p.scenario_a for p in slow.points] == ["closed-in1024-out128-p1", "closed-in1024-out128-p10",
                                                    "open-in256-out32-r4"]
    p10 = slow.points[1]
    ttft = next(f for f in p10.figures if f.key == "ttft_s/p90")
    point = next(s for s in a.scenarios if s.scenario == "closed-in1024-out128-p10")
    assert ttft.a == point.ttft_s.p90
    keys = {f.key for f in p10.figures}
    assert {"speed_from_start_tok_s/p50", "decode_tok_s/p99", "e2e_s/p50", "tpot_s/p90", "output_tok_s"} <= keys
    throughput = next(f for f in p10.figures if f.key == "output_tok_s")
    assert throughput.verdict == SLOWER and throughput.ci_low <= FACTOR <= throughput.ci_high
    opened = next(f for f in slow.points[2].figures if f.key == "output_tok_s")  # follows the arrival rate
    assert opened.verdict == CANNOT_TELL and "offered load" in opened.note


def test_replicates_resample_the_analysis_own_requests(runs):
    """The digest of a closed point's median is centred on the figure the summary reports."""
    analysis = analyse(load_run(runs.base))
    digests = bootstrap_digests(analysis)
    point = next(s for s in analysis.summary.scenarios if s.scenario == "closed-in1024-out128-p10")
    d = digests["closed-in1024-out128-p10/speed_from_start_tok_s/p50"]
    assert d[0] <= point.speed_from_start_tok_s.p50 <= d[-1]
    assert np.all(np.diff(d) >= 0)
    assert digests["headline/prompt_ingestion_tok_s"] is not None


def test_exit_codes_and_json(runs, capsys):
    code, out, err = _cli(capsys, "diff", str(runs.base), str(runs.same), "--fail-on-regression")
    assert code == 0, err
    assert "no significant change" in out and "Regression" not in out
    code, out, _ = _cli(capsys, "diff", str(runs.base), str(runs.slow))
    assert code == 0 and "slower" in out  # without --fail-on-regression a regression is only reported
    code, out, _ = _cli(capsys, "diff", str(runs.base), str(runs.slow), "--fail-on-regression")
    assert code == 3 and "Regression beyond 5 %" in out
    # a threshold above the regression: significant, but not by more than 30 %
    code, _, _ = _cli(capsys, "diff", str(runs.base), str(runs.slow), "--fail-on-regression",
                         "--threshold", "0.3")
    assert code == 0
    code, out, _ = _cli(capsys, "diff", str(runs.base), str(runs.slow), "--json", "--fail-on-regression")
    assert code == 3
    data = json.loads(out)
    for h in data["headlines"]:
        assert {"name", "a", "b", "ratio", "ci_low", "ci_high", "verdict"} <= set(h)
    by = {h["name"]: h for h in data["headlines"]}
    assert by["generation_tok_s_at_10_parallel_1024_128"]["verdict"] == "slower"
    assert data["regressions"] and data["points"][0]["figures"]
    code, _, err = _cli(capsys, "diff", str(runs.base), str(runs.slow), "--threshold", "5")
    assert code == 2 and "--threshold" in err


def test_runs_of_other_suites_are_refused_naming_what_could_be_compared(runs, capsys):
    code, out, err = _cli(capsys, "diff", str(runs.base), str(runs.other))
    assert code == 2 and out == ""
    assert err.count("\n") == 1  # one line
    assert "suite 'diff'" in err and "suite 'other'" in err
    assert "closed-in1024-out128-p10" in err and "--only-shared" in err
    code, out, err = _cli(capsys, "diff", str(runs.base), str(runs.other), "--only-shared")
    assert code == 0, err
    assert "closed · 1024 → 128 tokens · 10 parallel" in out and "Measured only in A" in out


def test_runs_sharing_nothing_are_refused(runs):
    a = load_sample(runs.other)
    empty = run_sample(a.summary.model_copy(update={"scenarios": [], "kv_cache": a.summary.kv_cache.model_copy(
        update={"tokens": None}), "ingestion": None, "generation": None}), {})
    with pytest.raises(UsageError, match="nothing to compare"):
        check_comparable(a, empty, only_shared=True)


def _figure(value: float, spread: Spread, unit: str = "tokens") -> Figure:
    return Figure("kv_cache_tokens", "KV cache capacity", unit, HIGHER, value, spread)


def test_kv_capacity_is_exact_bracketed_or_unknown_never_invented():
    exact = Spread(EXACT, note="declared by the server: exact")
    same = figure_diff(_figure(113_200, exact), _figure(113_200, exact))
    assert (same.ratio, same.ci_low, same.ci_high, same.verdict) == (1.0, 1.0, 1.0, NO_CHANGE)
    more = figure_diff(_figure(100_000, exact), _figure(120_000, exact))
    assert more.verdict == LARGER and more.interval == "exact" and more.ci_low == more.ci_high == 1.2
    assert figure_diff(_figure(120_000, exact), _figure(100_000, exact)).verdict == SMALLER
    # the saturation probe brackets the capacity: the ratio's bounds hold every ratio the brackets allow
    probe = figure_diff(_figure(100_000, Spread(BOUNDS, low=95_000, high=105_000)),
                        _figure(102_000, Spread(BOUNDS, low=97_000, high=107_000)))
    assert probe.interval == "bounds" and probe.ci_low == pytest.approx(97 / 105)
    assert probe.ci_high == pytest.approx(107 / 95) and probe.verdict == NO_SIGNIFICANT_CHANGE
    apart = figure_diff(_figure(100_000, exact), _figure(150_000, Spread(BOUNDS, low=140_000, high=160_000)))
    assert apart.verdict == LARGER and apart.ci_low == pytest.approx(1.4)
    # the usage extrapolation has no interval: the ratio is given, the verdict is not
    usage = figure_diff(_figure(100_000, exact), _figure(150_000, Spread(NONE, note="usage_extrapolation: no")))
    assert usage.ratio == 1.5 and usage.ci_low is None and usage.verdict == CANNOT_TELL
    assert usage.significant is None and "usage_extrapolation" in usage.note


def test_lower_is_better_for_latencies():
    d = np.linspace(0.9, 1.1, 41)
    a = Figure("ttft_s/p50", "TTFT p50", "s", LOWER, 1.0, Spread("bootstrap", d))
    b = Figure("ttft_s/p50", "TTFT p50", "s", LOWER, 0.5, Spread("bootstrap", d * 0.5))
    result = figure_diff(a, b)
    assert result.ratio == 0.5 and result.verdict == FASTER and not result.worse


def test_saved_digests_give_the_same_comparison(runs, slow, tmp_path):
    """The site compares rendered runs from summary.json and bootstrap.json alone: the same verdicts and
    intervals as a fresh analysis of their requests."""
    samples = []
    for run in (runs.base, runs.slow):
        analysis = analyse(load_run(run))
        write_digests(analysis, tmp_path / run.name)
        samples.append(saved_sample(tmp_path / run.name, analysis.summary))
    saved = diff_samples(*samples)
    for fresh, kept in zip(slow.headlines, saved.headlines, strict=True):
        assert fresh.verdict == kept.verdict
        assert kept.ci_low == pytest.approx(fresh.ci_low, rel=1e-4)
    no_file = saved_sample(tmp_path / "nowhere", samples[0].summary)
    assert all(f.spread.method in (NONE, EXACT) for f in no_file.headlines.values())


def test_a_point_is_the_same_point_whatever_it_measured(runs):
    """A waves point's largest wave is an outcome (it stops at saturation), not part of the suite: runs of one
    suite stay comparable when one saturated sooner."""
    a = load_sample(runs.base)
    waves = ScenarioSummary(scenario="waves-in1024-out16", kind="waves", prompt_tokens=1024, output_tokens=16,
                            parallel=48, requests=60)
    one = run_sample(a.summary.model_copy(update={"scenarios": [*a.summary.scenarios, waves]}), {})
    other = run_sample(a.summary.model_copy(update={"scenarios": [
        *a.summary.scenarios, waves.model_copy(update={"parallel": 96})]}), {})
    check_comparable(one, other)
