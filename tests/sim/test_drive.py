"""The virtual-time driver: it obeys the points' rules exactly, records what the load engine records, writes a run
directory that renders to a card with the model's own figures, and the same seed gives the same bytes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from simruns import simulate

from cardgen.card import render_run
from cardgen.hub.plan import published_run_json
from cardgen.kinds.batch.program import BatchProgram
from cardgen.kinds.closed.schema import ClosedParams
from cardgen.kinds.ingest.program import IngestProgram
from cardgen.kinds.openloop.program import OpenProgram
from cardgen.points import Point, expand
from cardgen.promtext import parse_metrics
from cardgen.rundir import RUN_JSON
from cardgen.schemas import RunInfo
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions, drive, simulate_closed_loop
from cardgen.sim.faults import FaultPlan
from cardgen.sim.perf import FixedPerf
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

P = FixedPerf(prefill_tok_s=8000.0, step_overhead_s=0.008, per_seq_s=0.0004, kv_capacity_tokens=12288,
              max_num_seqs=64)
CONFIG = SimConfig(model="m", perf="fixed")
JITTERY = DriveOptions(network_s=0.001, read_jitter_s=0.0002, step_jitter=0.05, seed=7)


def points(yaml: str) -> list[Point]:
    return expand(parse_suite(f"name: t\nscenarios:\n{yaml}", source="test suite"))


def by_point(run, name: str):
    return [d.record for d in run.requests if d.record.scenario == name]


@pytest.mark.parametrize("parallel, quota", [(1, 5), (4, 10), (10, 23), (8, 3)])
def test_closed_loop_sends_exactly_the_quota_with_parallel_in_flight(parallel, quota):
    (point,) = points(f"  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [16]\n"
                      f"    parallel: [{parallel}]\n    min_requests: {quota}\n")
    assert point.params.min_requests == max(quota, parallel)  # the suite's rounds rule: each user sends at least once
    run = drive([point], CONFIG, perf=P, options=JITTERY)
    recs = by_point(run, point.name)
    assert len(recs) == point.params.min_requests == run.points[0].requests
    assert sorted(r.index for r in recs) == list(range(len(recs)))
    t0 = run.points[0].started_unix
    assert sum(1 for r in recs if r.sent_at == t0) == parallel  # every user starts at once
    for r in recs:  # never more than `parallel` in flight, and a user sends again the moment it is answered
        assert sum(1 for q in recs if q.sent_at <= r.sent_at < q.end_at) <= parallel
        assert r.parallel == parallel and r.kind == "closed" and r.ok
    later = sorted(r.sent_at for r in recs if r.sent_at > t0)
    assert set(later) <= {r.end_at for r in recs}


def test_closed_loop_runs_at_least_min_duration():
    (point,) = points("  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [16]\n    parallel: [2]\n"
                      "    min_requests: 2\n    min_duration_s: 3\n")
    run = drive([point], CONFIG, perf=P)
    recs = by_point(run, point.name)
    t0 = run.points[0].started_unix
    assert max(r.sent_at for r in recs) - t0 < 3 <= max(r.end_at for r in recs) - t0
    assert len(recs) > 2


def test_open_loop_sends_at_the_points_arrival_offsets():
    suite = "  - kind: open\n    prompt_tokens: 256\n    output_tokens: 32\n    rates: [4, inf]\n    num_requests: 12\n"
    run = drive(points(suite), CONFIG, perf=P, options=JITTERY)
    for point, pr in zip(points(suite), run.points, strict=True):
        recs = sorted(by_point(run, point.name), key=lambda r: r.index)
        offsets = OpenProgram(point).arrival_offsets()
        assert [r.scheduled_at - pr.started_unix for r in recs] == pytest.approx(offsets, abs=1e-6)
        assert all(r.sent_at == r.scheduled_at and r.rate_rps == point.rate_rps for r in recs)
    rates = {r.rate_rps for r in run.records}
    assert rates == {4.0, float("inf")}


def test_waves_stop_at_saturation_of_a_small_kv_cache():
    # 1152 tokens a request: 10 fit in 12288 tokens (768 blocks), 11 must wait or be preempted
    step = points("  - kind: waves\n    prompt_tokens: 1024\n    output_tokens: 128\n    max_wave: 20\n"
                  "    search: step\n")
    run = drive(step, CONFIG, perf=P)
    assert run.points[0].sizes == list(range(1, 12)) and run.points[0].saturated == "wave of 11"
    recs = by_point(run, step[0].name)
    assert [sum(1 for r in recs if r.extra["wave"] == w) for w in range(1, 12)] == list(range(1, 12))
    for w in range(2, 12):  # the next wave leaves when the last request of the one before ended
        wave, before = [r for r in recs if r.extra["wave"] == w], [r for r in recs if r.extra["wave"] == w - 1]
        assert min(r.sent_at for r in wave) == max(r.end_at for r in before)
    bisect = drive(points("  - kind: waves\n    prompt_tokens: 1024\n    output_tokens: 128\n    max_wave: 20\n"),
                   CONFIG, perf=P)
    assert bisect.points[0].sizes == [1, 2, 4, 8, 16, 12, 10, 11]  # doubling, then bisecting to 10 / 11
    roomy = drive(step, CONFIG, perf=FixedPerf(kv_capacity_tokens=65536))
    assert roomy.points[0].sizes == list(range(1, 21)) and roomy.points[0].saturated is None


def test_ingest_one_at_a_time_in_order_and_batch_rounds():
    suite = ("  - kind: ingest\n    prompt_tokens: [16, 512, 64]\n    repeats: 2\n"
             "  - kind: batch\n    prompt_tokens: 128\n    output_tokens: 8\n    batch_sizes: [3]\n"
             "    warmups: 1\n    runs: 2\n")
    ingest, batch = points(suite)
    run = drive([ingest, batch], CONFIG, perf=P, options=JITTERY)
    recs = sorted(by_point(run, "ingest"), key=lambda r: r.index)
    assert [(r.prompt_tokens_target, r.repeat) for r in recs] == IngestProgram(ingest).ingest_order()
    assert all(b.sent_at == a.end_at for a, b in zip(recs, recs[1:], strict=False))
    rounds = sorted(by_point(run, batch.name), key=lambda r: r.sent_at)
    assert [(r.repeat, r.warmup) for r in rounds[::3]] == BatchProgram(batch).batch_rounds()
    for k in range(1, 3):
        assert {r.sent_at for r in rounds[3 * k:3 * k + 3]} == {max(r.end_at for r in rounds[3 * k - 3:3 * k])}
    assert run.points[1].started_unix == pytest.approx(run.points[0].ended_unix + JITTERY.pause_s)


def test_a_saturating_closed_point_leaves_out_the_larger_counts_of_its_pair():
    tiny = FixedPerf(kv_capacity_tokens=4096)  # 3 x 1152 tokens fit; at 4 parallel one request always waits
    suite = ("  - kind: closed\n    prompt_tokens: [1024]\n    output_tokens: [128]\n    parallel: [1, 3, 4, 8]\n"
             "    min_requests: 16\n")
    run = drive(points(suite), CONFIG, perf=tiny)
    ran = [(p.name, p.saturated is not None, p.skipped is not None) for p in run.points]
    assert ran[:2] == [("closed-in1024-out128-p1", False, False), ("closed-in1024-out128-p3", False, False)]
    assert ran[2][1] and ran[3] == ("closed-in1024-out128-p8", False, True)
    assert "waiting in 75% of readings" in run.points[2].saturated  # persistently, after the first round
    assert "saturated at 4 parallel" in run.points[3].skipped and run.points[3].requests == 0
    kept = drive(points(suite.replace("min_requests: 16\n", "min_requests: 16\n    stop_at_saturation: false\n")),
                 CONFIG, perf=tiny)
    assert kept.points[3].requests == 16
    # the saturated point stopped for its own reason; its saturation is said beside it
    assert [p.stop for p in run.points] == ["minimum reached", "minimum reached", "minimum reached", "skipped"]


def test_every_point_ends_with_its_stop_reason_as_run_json_records_it():
    suite = parse_suite("""
name: stops
scenarios:
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [16]
    parallel: [1, 2]
    min_requests: 10
    max_requests: 60
    target_ci: 0.02
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [16]
    parallel: [4]
    min_requests: 8
    max_duration_s: 0.2
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 128
    max_wave: 20
  - kind: open
    prompt_tokens: 64
    output_tokens: 4
    rates: [inf]
    num_requests: 3
""", source="test")
    # steps vary (the precision target needs variation to stop on); no network, so the users stay in step
    run = simulate(suite, CONFIG, perf=P, options=DriveOptions(step_jitter=0.05, seed=7))
    stops = {p.name: (p.stop, p.requests) for p in run.info.points}
    assert stops["closed-in128-out16-p1"][0] == "precision reached" and 10 < stops["closed-in128-out16-p1"][1] < 60
    assert stops["closed-in128-out16-p2"][0] in ("precision reached", "max_requests")
    assert stops["closed-in128-out16-p4"][0] == "max_duration"
    assert stops["waves-in1024-out128"] == ("saturated", sum(run.drive.points[3].sizes))
    assert stops["open-in64-out4-rinf"] == ("complete", 3)
    assert [p.name for p in run.info.points] == [p.name for p in expand(suite)]
    assert all(p.started_unix < p.ended_unix and p.attempt == 0 for p in run.info.points)


def test_records_follow_the_load_engine_conventions():
    suite = parse_suite("""
name: every-kind
scenarios:
  - kind: ingest
    prompt_tokens: [16, 1024, 2048]
  - kind: closed
    prompt_tokens: [512]
    output_tokens: [32]
    parallel: [4]
    min_requests: 8
  - kind: waves
    prompt_tokens: 512
    output_tokens: 16
    max_wave: 4
  - kind: open
    prompt_tokens: 64
    output_tokens: 8
    rates: [8]
    num_requests: 6
  - kind: batch
    prompt_tokens: 64
    output_tokens: 8
    batch_sizes: [2]
""", source="test")
    config = SimConfig(model="m", perf="fixed", faults=FaultPlan(every={"http500": 9}))
    run = simulate(suite, config, perf=P, options=JITTERY)
    recs = run.drive.records
    assert {r.kind for r in recs} == {"closed", "open", "waves", "ingest", "batch"}
    assert [r.end_at for r in recs] == sorted(r.end_at for r in recs)  # written in the order they ended
    failed = [r for r in recs if not r.ok]
    assert len(failed) == len(recs) // 9 and all(r.status == 500 and r.error_kind == "http_status" for r in failed)
    assert all(r.error.startswith('HTTP 500: {"error": {"message": "injected fault (http500)"') for r in failed)
    for r in recs:
        if r.ok:
            assert r.chunk_times == sorted(r.chunk_times) and r.first_token_at == r.chunk_times[0]
            assert r.sent_at < r.headers_at < r.first_token_at <= r.end_at == r.chunk_times[-1]
            assert len(r.chunk_times) == r.output_tokens == r.output_tokens_target
            assert r.prompt_tokens == r.prompt_tokens_target and r.finish_reason == "length"
        assert r.worker == "local" and r.group
        if r.kind == "waves":
            assert r.extra is not None and r.extra["wave"] == r.parallel
    info = run.info
    assert info.modelled and info.server.engine == "cardgen-sim" and info.sim.clock == "virtual"
    assert info.requests_total == len(recs) and info.failures_by_kind == {"http_status": len(failed)}
    assert info.server.models["data"][0]["id"] == "m" and info.server.extra["sim"]["perf"] == P.describe()
    scrapes = run.drive.scrapes
    assert scrapes[0].t < min(r.sent_at for r in recs) and scrapes[-1].t > max(r.end_at for r in recs)
    last = scrapes[-1]
    assert last.value("vllm:generation_tokens_total") == sum(r.output_tokens or 0 for r in recs)
    assert last.value("cardgen_sim_faults_total", kind="http500") == len(failed)
    assert last.value("vllm:time_to_first_token_seconds_count") == len(recs) - len(failed)


def test_a_scrape_is_what_the_servers_metrics_text_parses_to():
    from cardgen.sim.metrics import SimMetrics
    from cardgen.sim.virtual import VirtualServer

    metrics = SimMetrics(model_name="m", cache_config={"block_size": 16, "num_gpu_blocks": 768})
    sim = VirtualServer(P, metrics=metrics, faults=FaultPlan(every={"http500": 2}))
    for _ in range(5):
        sim.arrive(300, 20, at=0.0)
    sim.start_step()
    assert metrics.samples(sim.scheduler) == parse_metrics(metrics.render(sim.scheduler))
    sim.finish_step()
    sim.run()
    assert metrics.samples(sim.scheduler) == parse_metrics(metrics.render(sim.scheduler))


SMALL = parse_suite("""
name: small
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 1024, 2048, 3072, 4000]
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1, 10]
    min_requests: 10
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 64
    max_wave: 12
""", source="test")


def digests(run_dir: Path) -> dict[str, str]:
    """Each file's digest, run.json's as published (:func:`~cardgen.hub.plan.published_run_json`): without the
    pid, host and heartbeat of the process that wrote it, which are the writer's, not the run's."""
    return {p.name: hashlib.sha256(published_run_json(p) if p.name == RUN_JSON else p.read_bytes()).hexdigest()
            for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_the_run_directory_renders_to_a_card_with_the_models_own_figures(tmp_path):
    run = simulate(SMALL, CONFIG, perf=P, options=JITTERY, run_dir=tmp_path / "fixed")
    assert {"run.json", "requests.jsonl", "server_metrics.jsonl"} <= set(digests(tmp_path / "fixed"))
    render_run(tmp_path / "fixed")
    summary = json.loads((tmp_path / "fixed" / "summary.json").read_text())
    assert summary["modelled"] is True and summary["engine"] == "cardgen-sim"
    assert summary["kv_cache_tokens"] == P.kv_capacity_tokens and summary["kv_cache_method"] == "server_config"
    assert summary["prompt_ingestion_tok_s"] == pytest.approx(P.prefill_tok_s, rel=0.03)
    assert run.drive.points[3].saturated  # the waves filled the cache
    assert "MODELLED, NOT MEASURED" in (tmp_path / "fixed" / "README.md").read_text()


def test_a_roofline_run_renders_the_models_prefill_rate_and_capacity(tmp_path):
    from cardgen.sim.calibration import ingestion_tok_s
    from cardgen.sim.config import build_perf

    config = SimConfig(model="CodeLlama-7b", gpu="A100-80GB")
    perf = build_perf(config)
    simulate(SMALL, config, run_dir=tmp_path / "roofline")
    render_run(tmp_path / "roofline")
    summary = json.loads((tmp_path / "roofline" / "summary.json").read_text())
    assert summary["kv_cache_tokens"] == perf.kv_capacity_tokens
    lengths = SMALL.scenarios[0].lengths()
    # Two estimators of one rate: the run's robust fit over its requests, and the calibration's least squares over
    # isolated requests. They differ by 2 % without chunked prefill and by 3 % with V1's 2048-token chunks (TTFT
    # is a staircase, one step overhead per chunk, which the faster the prefill the taller it stands).
    assert summary["prompt_ingestion_tok_s"] == pytest.approx(ingestion_tok_s(perf, lengths=lengths), rel=0.05)
    info = RunInfo.model_validate_json((tmp_path / "roofline" / "run.json").read_text())
    assert (info.gpu.name, info.gpu.count, info.gpu.modelled) == ("A100-80GB", 1, True)
    assert info.sim.gpu == "A100-80GB"


def test_same_seed_same_files(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        simulate(SMALL, CONFIG, perf=P, options=DriveOptions(seed=seed, network_s=0.001, read_jitter_s=0.0002,
                                                             step_jitter=0.02), run_dir=tmp_path / name)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")
    assert digests(tmp_path / "a")["requests.jsonl"] != digests(tmp_path / "c")["requests.jsonl"]


def test_plan_figures_per_point():
    run = drive(expand(SMALL), CONFIG, perf=P, options=DriveOptions(scrapes=False))
    assert run.scrapes == []
    assert [p.requests for p in run.points] == [7, 10, 10, sum(run.points[3].sizes)]
    assert all(p.duration_s > 0 for p in run.points)
    assert run.seconds == pytest.approx(sum(p.duration_s for p in run.points) + 0.5 + 3 * 0.5 + 0.1 + 0.001)


def test_simulate_closed_loop_is_the_drivers_closed_loop():
    point = Point(name="c", group="g", endpoint="completions", timeout_s=60, prompt_tokens=300,
                  output_tokens=12, parallel=3, params=ClosedParams(min_requests=7))
    run = drive([point], SimConfig(model="m", perf="fixed", metrics=False), perf=P,
                options=DriveOptions(start_unix=0.0, lead_s=0.0, scrapes=False))
    served = sorted((replace(d.served, tag=None) for d in run.requests), key=lambda r: r.index)
    again = simulate_closed_loop(P, prompt_tokens=300, output_tokens=12, parallel=3, num_requests=7)
    assert [replace(r, tag=None) for r in again] == served


def test_precision_targets_stop_closed_ingest_and_batch_points_early_on_a_steady_server():
    suite = ("  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [32]\n    parallel: [4]\n"
             "    min_requests: 1\n    target_ci: 0.03\n    max_requests: 400\n"
             "  - kind: ingest\n    prompt_tokens: [16, 256, 1024, 2048]\n    repeats: 10\n    target_ci: 0.03\n"
             "  - kind: batch\n    prompt_tokens: 64\n    output_tokens: 32\n    batch_sizes: [4]\n    runs: 3\n"
             "    target_ci: 0.03\n    max_runs: 20\n")
    steady = DriveOptions(step_jitter=0.01, seed=3)
    closed, ingest, batch = drive(points(suite), CONFIG, perf=P, options=steady).points
    assert closed.stop == "precision reached" and 4 * 6 <= closed.requests < 400
    assert ingest.stop == "precision reached" and ingest.requests in (4, 8)  # one or two sweeps, not ten
    assert batch.stop == "precision reached" and batch.requests == 4 * (1 + 3)  # warm-up + the minimum runs


def test_precision_targets_run_to_their_caps_on_a_noisy_server():
    suite = ("  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [32]\n    parallel: [4]\n"
             "    min_requests: 1\n    target_ci: 0.01\n    max_requests: 120\n"
             "  - kind: batch\n    prompt_tokens: 64\n    output_tokens: 32\n    batch_sizes: [4]\n    runs: 3\n"
             "    target_ci: 0.005\n    max_runs: 6\n")
    noisy = DriveOptions(step_jitter=0.4, read_jitter_s=0.02, seed=3)
    closed, batch = drive(points(suite), CONFIG, perf=P, options=noisy).points
    assert closed.stop == "max_requests" and closed.requests == 120
    assert batch.stop == "complete" and batch.requests == 4 * (1 + 6)


def test_a_precise_closed_point_stops_on_its_fifth_whole_steady_round():
    """Users in step (no network): the ramp round, then 5 steady rounds are the minimum batches; precision is
    judged when the 6th round's last request ends (all of it in: a batch never straddles two rounds), and
    only the parallel - 1 users that already sent again are left to drain."""
    from cardgen.precision import MIN_BATCHES

    suite = ("  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [32]\n    parallel: [4]\n"
             "    min_requests: 1\n    target_ci: 0.5\n    max_requests: 400\n")
    closed, = drive(points(suite), CONFIG, perf=P, options=DriveOptions(step_jitter=0.01, seed=3)).points
    assert closed.stop == "precision reached"
    assert closed.requests == 4 * (1 + MIN_BATCHES) + 3


@pytest.mark.parametrize("said", [
    {"time_to_first_token_ms": 12.5, "generation_time_ms": 300.25, "queue_time_ms": 0.0},
    {"time_to_first_token_ms": 12.5, "generation_time_ms": 300.25, "queue_time_ms": 3.0, "mean_itl_ms": 2.5},
    {"time_to_first_token_ms": 1, "generation_time_ms": 2, "queue_time_ms": 0, "mean_itl_ms": 3,
     "encode_time_ms": 4},
])
def test_a_records_engine_timings_are_what_the_streamed_metrics_say(said):
    """Made at once from the virtual server's metrics, they are what a client's record of the stream holds
    (EngineTimings.of_response of vLLM's ``metrics``), to the JSON."""
    from cardgen.schemas.records import EngineTimings

    made = EngineTimings.of_vllm_numbers(dict(said))
    streamed = EngineTimings.of_response({"source": "metrics", **said})
    assert made == streamed and made.model_dump_json() == streamed.model_dump_json()
