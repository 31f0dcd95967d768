"""How each point ran, from run.json's points: superseded records counted apart and left out of every figure,
stop reasons on every scenario, rows for the points that were not run, the closed loop's steady state and the
precision each point reached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from simruns import synthetic_run

from cardgen.analysis import analyse, load_run
from cardgen.kinds.closed.analysis import ClosedResult
from cardgen.precision import median_interval, steady_mask
from cardgen.rundir import REQUESTS_JSONL, RUN_JSON

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "run_small"
RERUN = "closed-in1024-out128-p4"
SATURATING, SKIPPED = "closed-in128-out32-p4", "closed-in128-out32-p10"


def edit_fixture(run: Path, *, records=None, points=None) -> Path:
    """A copy of the committed run with its records (``records(list of dicts) -> list``) and run.json's points
    (``points(dict name -> point dict)``) changed in place."""
    shutil.copytree(FIXTURE, run)
    if records is not None:
        lines = [json.loads(x) for x in (run / REQUESTS_JSONL).read_text().splitlines()]
        (run / REQUESTS_JSONL).write_text("".join(json.dumps(r) + "\n" for r in records(lines)))
    if points is not None:
        info = json.loads((run / RUN_JSON).read_text())
        points({p["name"]: p for p in info["points"]})
        (run / RUN_JSON).write_text(json.dumps(info))
    return run


def slowed(record: dict) -> dict:
    """The record as if the server had been twice as slow: every chunk and the end twice as late."""
    sent = record["sent_at"]
    late = {k: sent + 2 * (record[k] - sent) for k in ("first_token_at", "end_at")}
    return {**record, **late, "chunk_times": [sent + 2 * (t - sent) for t in record["chunk_times"]]}


def rerun(lines: list[dict]) -> list[dict]:
    """RERUN's records twice: a slow cut-off attempt 0 and the clean attempt 1 that replaced it."""
    out = []
    for r in lines:
        if r["scenario"] == RERUN:
            out += [slowed(r), {**r, "attempt": 1}]
        else:
            out.append(r)
    return out


@pytest.fixture(scope="module")
def plain():
    return analyse(load_run(FIXTURE)).summary


def by_name(summary):
    return {s.scenario: s for s in summary.scenarios}


def test_superseded_records_are_counted_apart_and_left_out_of_every_figure(tmp_path, plain):
    def second_attempt(points):
        points[RERUN]["attempt"] = 1

    s = analyse(load_run(edit_fixture(tmp_path / "run", records=rerun, points=second_attempt))).summary
    point, before = by_name(s)[RERUN], by_name(plain)[RERUN]
    assert s.superseded_requests == point.superseded_requests == before.requests > 0
    assert s.requests_total == plain.requests_total  # the slow attempt is not counted ...
    assert point.requests == before.requests
    for name in ("speed_from_start_tok_s", "ttft_s", "e2e_s", "itl_s"):  # ... nor in any figure
        assert getattr(point, name) == getattr(before, name), name
    assert point.req_s == before.req_s and point.output_tok_s == before.output_tok_s
    # the tables and the pair's figures are built from the same scenario figures
    assert all(sc.superseded_requests == 0 for sc in s.scenarios if sc.scenario != RERUN)


def test_a_run_without_points_counts_every_record(tmp_path, plain):
    def old(run: Path) -> Path:
        info = json.loads((run / RUN_JSON).read_text())
        info["points"] = []
        (run / RUN_JSON).write_text(json.dumps(info))
        return run

    run = old(edit_fixture(tmp_path / "run", records=rerun))
    s = analyse(load_run(run)).summary
    assert s.superseded_requests == 0
    assert by_name(s)[RERUN].requests == 2 * by_name(plain)[RERUN].requests
    assert all(sc.stop is None for sc in s.scenarios)


def skip_after_saturation(points):
    points[SATURATING].update(stop="saturated", detail="KV cache 97% full", saturation="KV cache 97% full")
    points[SKIPPED].update(stop="skipped", started_unix=None, ended_unix=None, requests=0,
                           detail=f"{SATURATING} saturated the server (KV cache 97% full)")


def without_skipped(lines):
    return [r for r in lines if r["scenario"] != SKIPPED]


def test_every_point_says_why_it_stopped_and_skipped_points_keep_their_row(tmp_path):
    run = edit_fixture(tmp_path / "run", records=without_skipped, points=skip_after_saturation)
    s = analyse(load_run(run)).summary
    info = load_run(run).info
    assert [sc.scenario for sc in s.scenarios] == [p.name for p in info.points]  # suite order, all of them
    for sc, p in zip(s.scenarios, info.points, strict=True):
        assert (sc.stop, sc.stop_detail) == (p.stop, p.detail)
    skipped = by_name(s)[SKIPPED]
    assert skipped.not_run and skipped.requests == 0 and skipped.stop == "skipped"
    assert (skipped.kind, skipped.prompt_tokens, skipped.output_tokens, skipped.parallel) == ("closed", 128, 32, 10)
    assert skipped.ttft_s.n == 0 and skipped.req_s is None and skipped.precision is None
    assert by_name(s)[SATURATING].saturation == "KV cache 97% full"
    # a point that was not run measures nothing: it is in no pair, threshold or table of figures
    (pair,) = [c for c in ClosedResult.model_validate(s.kinds["closed"]).capacity if c.prompt_tokens == 128]
    assert pair.parallel_tested == [1, 4]
    assert s.missing == []


# -- steady state and precision, on runs long enough to have them ------------------------------------------

STEADY_SUITE = """
name: steady
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 1024, 1536, 2048, 3072, 4000]
    repeats: 2
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1]
    min_requests: 10
    target_ci: 0.03
    max_requests: 400
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [4, 10]
    min_requests: 10
    min_rounds: 12
    stop_at_saturation: false
  - kind: batch
    prompt_tokens: 128
    output_tokens: 16
    batch_sizes: [2, 4]
    runs: 4
"""


@pytest.fixture(scope="module")
def steady_run():
    data, _ = synthetic_run(suite=STEADY_SUITE)
    return data, analyse(data)


def point_records(data, name):
    return sorted((r for r in data.requests if r.scenario == name and r.ok and not r.warmup),
                  key=lambda r: r.sent_at)


CLOSED = ["closed-in1024-out128-p1", "closed-in1024-out128-p4", "closed-in1024-out128-p10"]


@pytest.mark.parametrize("name", CLOSED)
def test_closed_figures_come_from_the_steady_requests(steady_run, name):
    data, analysis = steady_run
    point = by_name(analysis.summary)[name]
    records = point_records(data, name)
    mask = steady_mask([r.sent_at for r in records], [r.end_at for r in records], parallel=point.parallel)
    steady = [r for r, m in zip(records, mask, strict=True) if m]
    assert point.steady_state is True
    assert point.steady_requests == len(steady) and point.ramp_drain_requests == len(records) - len(steady)
    # the first round (all users at once) and the requests still in flight when the point stopped are left out
    assert point.ramp_drain_requests >= 2 * point.parallel - 1
    assert point.requests == len(records)  # every request sent is still counted
    ttfts = [r.first_token_at - r.sent_at for r in steady]
    assert point.ttft_s.n == len(steady) and point.ttft_s.p50 == pytest.approx(float(np.median(ttfts)))
    # rates over the steady window (first completion to last send), each request for its part inside it
    start, end = min(r.end_at for r in records), max(r.sent_at for r in records)
    share = [max(0.0, min(r.end_at, end) - max(r.sent_at, start)) / (r.end_at - r.sent_at) for r in records]
    assert point.req_s == pytest.approx(sum(share) / (end - start))
    assert point.output_tok_s == pytest.approx(sum(f * r.output_tokens for f, r in zip(share, records,
                                                                                          strict=True)) / (end - start))
    assert point.req_s == pytest.approx(len(records) / point.duration_s, rel=0.05)  # what the whole point did


@pytest.mark.parametrize("name", CLOSED)
def test_closed_precision_is_the_batch_means_interval_of_the_steady_medians(steady_run, name):
    data, analysis = steady_run
    point = by_name(analysis.summary)[name]
    records = point_records(data, name)
    steady = [r for r, m in zip(records, steady_mask([r.sent_at for r in records], [r.end_at for r in records],
                                                           parallel=point.parallel),
                                strict=True) if m]
    speed = median_interval([r.output_tokens / (r.end_at - r.sent_at) for r in steady], parallel=point.parallel)
    ttft = median_interval([r.first_token_at - r.sent_at for r in steady], parallel=point.parallel)
    p = point.precision
    assert p.method == "batch means" and p.batches == speed.batches >= 5
    assert p.speed_from_start == pytest.approx(speed.relative) and p.ttft == pytest.approx(ttft.relative)
    assert 0 < p.speed_from_start < 0.05 and 0 < p.ttft < 0.05 and 0 <= p.decode < 0.05


def test_a_single_stream_reaches_its_target_quickly(steady_run):
    _, analysis = steady_run
    point = by_name(analysis.summary)["closed-in1024-out128-p1"]
    assert point.stop == "precision reached" and point.requests < 50 and point.target_ci == 0.03
    # the final steady set is the running one without its drain: as precise as the stop said
    assert max(point.precision.speed_from_start, point.precision.ttft) <= 0.03
    assert by_name(analysis.summary)["closed-in1024-out128-p4"].target_ci is None


def test_headline_precision_and_the_ingestion_slope_interval(steady_run):
    _, analysis = steady_run
    s = analysis.summary
    hp = s.headline_precision
    headline = by_name(s)["closed-in1024-out128-p10"].precision
    assert hp.generation_tok_s_at_10_parallel_1024_128 == headline.speed_from_start
    assert hp.ttft_s_at_10_parallel_1024_128 == headline.ttft
    assert hp.decode_tok_s_at_10_parallel_1024_128 == headline.decode
    assert s.generation.requests == by_name(s)["closed-in1024-out128-p10"].steady_requests
    fit = s.ingestion
    assert 0 < fit.slope_ci_relative < 0.05 and hp.prompt_ingestion_tok_s == fit.slope_ci_relative
    assert fit.tok_s_slope_ci_low < fit.tok_s < fit.tok_s_slope_ci_high
    assert 1 / fit.tok_s_slope_ci_low - 1 / fit.tok_s == pytest.approx(fit.slope_ci_half_width_s_per_token)
    assert by_name(s)["ingest"].precision.slope == fit.slope_ci_relative
    assert hp.kv_cache_tokens == 0.0  # the server declares its capacity


def test_a_point_too_short_for_a_steady_state_keeps_every_request(plain):
    # the committed run's 128 / 32 point at 10 parallel has one round: the ramp is all there is
    point = by_name(plain)["closed-in128-out32-p10"]
    assert point.steady_state is False and point.steady_requests < point.parallel
    assert point.ramp_drain_requests == 0 and point.ttft_s.n == point.requests - point.failed
    assert point.req_s == pytest.approx((point.requests - point.failed) / point.duration_s)
    assert point.precision.speed_from_start is None  # fewer than five batches of whole rounds
