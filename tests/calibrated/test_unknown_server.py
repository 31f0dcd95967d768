"""The calibrated card of a server the calibration is not told about, figure by figure against the same suite
measured point by point on the same server (virtual time, in process; see unknown_server.py)."""

from __future__ import annotations

import pytest

from cardgen.analysis.rundata import load_run
from cardgen.calibrated.accuracy import (
    MEDIAN_GOAL,
    WORST_GOAL,
    Accuracy,
    accuracy,
    format_accuracy,
    model_accuracy,
)
from cardgen.calibrated.figures import figures_of_records
from cardgen.card import render_run
from cardgen.rundir import PREDICTED_JSONL
from cardgen.schemas.calibration import FIGURES

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


def test_every_predicted_figure_is_within_the_goals_of_the_point_measured(unknown):
    calibrated, truth = unknown.analysis("calibrated").summary, unknown.analysis("truth").summary
    acc = accuracy(calibrated, truth)
    table = format_accuracy(acc, title="unknown server")
    assert len(acc.rows) >= 20, table  # most of the grid was predicted, not measured
    assert not acc.mismatched, table  # the prediction runs what the measurement runs, skips what it skips
    for name, _, _ in FIGURES:
        assert acc.median(name) <= MEDIAN_GOAL, table
        assert acc.worst(name)[1] <= WORST_GOAL, table


def test_the_fitted_server_predicted_every_point_before_its_checks(unknown):
    """The model's own error, measured points included (make bench prints it beside the card's)."""
    truth = unknown.analysis("truth").summary
    kept = accuracy(unknown.analysis("calibrated").summary, truth)
    every = model_accuracy(figures_of_records(load_run(unknown.calibrated).predicted), truth)
    assert len(every.rows) > len(kept.rows) and {r.point for r in kept.rows} < {r.point for r in every.rows}
    assert every.met, format_accuracy(every, title="every point")
    assert "goal (median <= 5%, largest <= 10% per figure): met" in format_accuracy(every, title="x")


def test_the_calibration_measures_a_fraction_of_the_suite_and_says_what_it_predicted(unknown):
    s = unknown.analysis("calibrated").summary
    by_basis = {b: [x for x in s.scenarios if x.basis == b] for b in ("measured", "predicted")}
    assert len(by_basis["predicted"]) > len(by_basis["measured"])
    assert {x.scenario for x in s.scenarios} == set(unknown.info.calibration.order)
    for x in by_basis["predicted"]:
        assert x.prediction is not None and x.prediction.point == x.scenario
        if x.requests:  # figures in the same fields, their intervals the fit's
            assert x.speed_from_start_tok_s.p50 and x.output_tok_s
            assert x.speed_from_start_tok_s.p50_ci_low <= x.speed_from_start_tok_s.p50 <= x.speed_from_start_tok_s.p50_ci_high
            assert x.prediction.high.output_tok_s > x.prediction.low.output_tok_s
            assert x.prediction.check is not None and x.prediction.check_errors is not None
    assert s.headline.generation_tok_s_at_10_parallel_1024_128 is None or s.generation.scenario in {
        x.scenario for x in by_basis["measured"]}  # a headline is never predicted
    assert (unknown.calibrated / PREDICTED_JSONL).stat().st_size > 0


def test_the_fit_recovers_the_hidden_rates_and_reads_the_scheduler(unknown):
    cal = unknown.info.calibration
    perf = unknown.perf
    constants = {c.name: c for c in cal.constants}
    truth = {"compute_flop_s": perf.gpu.peak_flops * perf.compute_efficiency,
             "bandwidth_byte_s": perf.gpu.bandwidth_bytes_s * perf.engine.bandwidth_efficiency,
             "step_overhead_s": perf.engine.step_overhead_s}
    for name, value in truth.items():
        c = constants[name]
        assert abs(c.value / value - 1) < 0.10, (name, c.value, value)
        assert c.start != c.value and abs(c.start / value - 1) > 0.15  # it did not start there
        assert c.low <= c.value <= c.high
    settings = {x.name: x for x in cal.settings}
    assert settings["chunked_prefill"].value is False  # vLLM 0.6 prefills whole prompts at this context
    assert settings["max_num_batched_tokens"].value == perf.max_num_batched_tokens
    assert settings["kv_capacity_tokens"].value == perf.kv_capacity_tokens
    assert not any(x.source.startswith("assumed") for x in cal.settings)
    assert cal.fit.converged and cal.fit.median_residual < 0.03


def test_spot_checks_are_the_largest_load_of_each_pair_and_a_long_output(unknown):
    cal = unknown.info.calibration
    checked = {c.point for c in cal.spot_checks}
    passed = [c for c in cal.spot_checks if c.passed]
    assert len(passed) >= 0.8 * len(cal.spot_checks), [c.note for c in cal.spot_checks]
    missed = {c.pair for c in cal.spot_checks if not c.passed}
    assert set(cal.remeasured_pairs) == missed
    # never less true than a measured card: a pair whose check missed has no predicted point left that ran
    assert not [p for p in cal.predictions if p.pair in missed and p.requests]
    ran = {p.name for p in unknown.info.points}
    assert checked <= ran and not checked & {i.name for i in cal.identify}
    assert any(name.endswith("-out512-p32") or "-out512-" in name for name in checked)
    for pair in ("32/16", "1024/128", "4096/512"):
        assert any(c.pair == pair for c in cal.spot_checks), pair


def test_the_card_shows_which_is_which(unknown):
    card = render_run(unknown.calibrated).read_text("utf-8")
    assert "### Calibrated:" in card and "(predicted)" in card
    assert "Spot checks:" in card and "Fitted constants" in card and "Calibrated points: the fitted server" in card
    checks = len(unknown.info.calibration.spot_checks)
    assert "The fit's residuals on the measured points" in card and "| ingest | TTFT at 16 prompt tokens |" in card
    assert f"Measured error of the prediction: on this server, over its {checks} spot checks, speed from start" in card


def test_an_error_table_with_no_predicted_point_judges_nothing():
    table = format_accuracy(Accuracy([], []), title="every check missed")
    assert "nothing to judge, no point was left predicted" in table and " met" not in table
