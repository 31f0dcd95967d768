"""What a calibration measures first, what it checks, and what it measures instead when a check misses."""

from __future__ import annotations

from cardgen.calibrated import check, identify
from cardgen.calibrated.predict import Prediction, pair_of
from cardgen.points import expand
from cardgen.schemas.calibration import FigureValues, PointPrediction
from cardgen.schemas.run import PointOutcome
from cardgen.stops import STOP_SKIPPED
from cardgen.suite import load_suite, parse_suite


def test_identify_on_the_full_grid_picks_one_point_per_constant_and_the_headline():
    points = expand(load_suite("full"))
    chosen = identify.choose(points, kv_declared=True, max_model_len=16384)
    names = [c.point.name for c in chosen]
    assert names == ["ingest", "closed-in32-out128-p1", "closed-in32-out128-p16", "closed-in1024-out128-p10",
                     "closed-in4096-out128-p4"]
    assert all(c.in_suite and c.why for c in chosen)
    assert "headline" in chosen[3].why and "bandwidth" in chosen[1].why and "per-sequence" in chosen[2].why


def test_identify_measures_the_waves_only_when_the_server_hides_its_capacity():
    points = expand(load_suite("quick"))
    declared = [c.point.name for c in identify.choose(points, kv_declared=True, max_model_len=16384)]
    hidden = [c.point.name for c in identify.choose(points, kv_declared=False, max_model_len=16384)]
    assert "waves-in1024-out128" not in declared and "waves-in1024-out128" in hidden


def test_a_suite_without_an_ingestion_sweep_gets_a_probe_of_its_own():
    suite = parse_suite("name: s\nscenarios:\n  - {kind: closed, prompt_tokens: [64], output_tokens: [32], "
                        "parallel: [1, 8]}\n", source="s")
    chosen = identify.choose(expand(suite), kv_declared=True, max_model_len=2048)
    probe = chosen[0]
    assert probe.point.name == "calibrate-ingest" and not probe.in_suite and probe.point.kind == "ingest"
    lengths = probe.point.params.lengths
    assert max(lengths) == 1024 and len(lengths) == 8  # half the served context
    assert [c.point.name for c in chosen[1:]] == ["closed-in64-out32-p1"]  # p8 is the pair's largest: a check's


def _prediction(points, skipped=(), widths=None):
    outcomes = {p.name: PointOutcome(name=p.name, kind=p.kind, started_unix=0.0, ended_unix=10.0 + i,
                                     requests=5, stop=STOP_SKIPPED if p.name in skipped else "complete")
                for i, p in enumerate(points)}
    preds = {p.name: PointPrediction(point=p.name, pair=pair_of(p),
                                     value=FigureValues(ttft_s=1.0),
                                     low=FigureValues(ttft_s=1.0 / (widths or {}).get(p.name, 1.01)),
                                     high=FigureValues(ttft_s=(widths or {}).get(p.name, 1.01)))
             for p in points}
    return Prediction(records=[], scrapes=[], outcomes=outcomes, points=preds, seconds=0.0)


def test_checks_are_each_pairs_largest_load_that_ran_and_a_long_output():
    suite = parse_suite("""name: s
scenarios:
  - {kind: closed, prompt_tokens: [32, 1024], output_tokens: [16, 1024], parallel: [1, 4, 16]}
  - {kind: open, prompt_tokens: 256, output_tokens: 64, rates: [2, inf]}
  - {kind: batch, prompt_tokens: 500, output_tokens: 500, batch_sizes: [1, 8]}
""", source="s")
    points = expand(suite)
    prediction = _prediction(points, skipped={"closed-in1024-out1024-p16"},
                             widths={"closed-in1024-out16-p4": 3.0})
    chosen = {c.point.name: c for c in check.choose(points, prediction, measured={"closed-in32-out16-p16"})}
    assert {"closed-in32-out16-p4", "closed-in32-out1024-p16", "closed-in1024-out16-p16",
            "closed-in1024-out1024-p4", "open-in256-out64-rinf", "batch-in500-out500-b8",
            "closed-in1024-out16-p4"} == set(chosen)
    assert "largest" in chosen["closed-in32-out16-p4"].why  # 32/16's largest was measured already: the next
    assert "widest interval" in chosen["closed-in1024-out16-p4"].why
    assert chosen["closed-in1024-out1024-p4"].pair == "1024/1024"


def test_judge_misses_on_a_figure_beyond_the_tolerance_or_a_saturation_that_was_not():
    c = check.Check(expand(load_suite("quick"))[1], "1024/128", "why")
    predicted = FigureValues(speed_from_start_tok_s=100.0, ttft_s=0.1)
    ok = check.judge(c, predicted, FigureValues(speed_from_start_tok_s=97.0, ttft_s=0.104), tolerance=0.05,
                     saturated_predicted=False, saturated_measured=False)
    assert ok.passed and ok.errors.speed_from_start_tok_s == 100.0 / 97.0 - 1
    off = check.judge(c, predicted, FigureValues(speed_from_start_tok_s=90.0, ttft_s=0.1), tolerance=0.05,
                      saturated_predicted=False, saturated_measured=False)
    assert not off.passed and "11.1%" in off.note
    sat = check.judge(c, predicted, FigureValues(speed_from_start_tok_s=100.0, ttft_s=0.1), tolerance=0.05,
                      saturated_predicted=True, saturated_measured=False)
    assert not sat.passed and "saturated" in sat.note


def test_a_missed_pair_is_measured_up_to_its_measured_saturation():
    points = expand(load_suite("full"))
    by = {p.name: p for p in points}
    run, skipped = check.pair_points(points, "1024/128", measured={"closed-in1024-out128-p10"},
                                     saturated=[by["closed-in1024-out128-p24"]])
    names = [p.name for p in run]
    assert names[:4] == ["closed-in1024-out128-p1", "closed-in1024-out128-p2", "closed-in1024-out128-p4",
                         "closed-in1024-out128-p8"]
    assert "closed-in1024-out128-p10" not in names and "waves-in1024-out128" in names
    assert "open-in1024-out128-r4" in names
    assert [p.name for p, _ in skipped] == ["closed-in1024-out128-p32", "closed-in1024-out128-p48",
                                            "closed-in1024-out128-p64"]
    assert all("saturated at 24 parallel" in why for _, why in skipped)
