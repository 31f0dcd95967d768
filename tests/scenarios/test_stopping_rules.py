"""The points' stopping rules, run by the controller on the virtual server in virtual time, in process: a closed
loop stops on precision (judged where every process's records meet, also split over two processes), runs to its
cap on a noisy server, a saturated pair leaves out its larger counts (unless run_saturated), waves bisect to the
KV capacity, ingestion and batch stop on their intervals, and every point ends with why it stopped. No clock is
raced: the same arguments give the same run."""

from __future__ import annotations

from cardgen.points import Point, expand
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.perf import FixedPerf
from cardgen.suite import parse_suite

CONFIG = SimConfig(model="test-model", perf="fixed")
# 30 ms steps: the figures of a steady point are known after a few rounds
STEADY = FixedPerf(prefill_tok_s=200_000.0, step_overhead_s=0.03, per_seq_s=0.0002, kv_capacity_tokens=65536)
# 4096 tokens of KV cache (256 blocks of 16); a prefill budget for both prompts of a 2-user point at once
SMALL_KV = FixedPerf(prefill_tok_s=200_000.0, step_overhead_s=0.010, per_seq_s=0.0002, kv_capacity_tokens=4096,
                     max_num_batched_tokens=512)
PRECISION = ("- {{kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: 4, min_requests: 20, "
             "max_requests: {cap}, target_ci: 0.03}}\n")


def points(yaml: str) -> list[Point]:
    return expand(parse_suite(f"name: t\nscenarios:\n{yaml}", source="test suite"))


def records(run, name: str):
    return [d.record for d in run.requests if d.record.scenario == name]


def test_a_closed_point_stops_on_precision_before_its_cap_on_a_steady_server():
    for processes in (1, 2):
        run = drive(points(PRECISION.format(cap=120)), CONFIG, perf=STEADY,
                    options=DriveOptions(step_jitter=0.01, seed=5, processes=processes))
        (point,) = run.points
        recs = records(run, point.name)
        assert point.stop == "precision reached", point
        assert 20 <= point.requests == len(recs) < 120
        assert point.detail.startswith("speed from start +-") and "(target +-3%)" in point.detail
        assert point.saturated is None and point.attempt == 0
        workers = {r.worker for r in recs}
        assert workers == ({"local"} if processes == 1 else {"worker-0", "worker-1"})  # both stopped, on all records


def test_a_closed_point_runs_to_its_cap_on_a_noisy_server():
    noisy = DriveOptions(step_jitter=0.4, read_jitter_s=0.02, seed=3)
    (point,) = drive(points(PRECISION.format(cap=60)), CONFIG, perf=STEADY, options=noisy).points
    assert point.stop == "max_requests" and point.requests == 60
    assert point.detail.startswith("max_requests 60 reached first: speed from start +-")


def test_a_saturated_pair_skips_its_larger_counts_and_waves_bracket_the_kv_capacity():
    prompt, output = 200, 57  # 256 tokens at the end: 16 blocks, so exactly 16 requests fit the 256 blocks
    capacity = (SMALL_KV.kv_capacity_tokens // 16) // -(-(prompt + output - 1) // 16)
    suite = points(
        "- {kind: closed, prompt_tokens: 200, output_tokens: 8, parallel: [2, 24, 32, 48], min_requests: 4}\n"
        # every round starts with 8 prompts prefilled one step each: requests wait briefly, then none do
        "- {kind: closed, prompt_tokens: 250, output_tokens: 32, parallel: 8, min_requests: 80}\n"
        f"- {{kind: waves, prompt_tokens: {prompt}, output_tokens: {output}, max_wave: 20}}\n")
    run = drive(suite, CONFIG, perf=SMALL_KV, options=DriveOptions(scrape_interval_s=0.1))
    ran = {p.name: p for p in run.points}
    assert list(ran) == ["closed-in200-out8-p2", "closed-in200-out8-p24", "closed-in200-out8-p32",
                         "closed-in200-out8-p48", "closed-in250-out32-p8", "waves-in200-out57"]
    assert ran["closed-in200-out8-p2"].saturated is None
    saturated = ran["closed-in200-out8-p24"]
    # it stopped for its own reason; its saturation is said beside it
    assert saturated.stop == "minimum reached" and saturated.saturated.startswith("KV cache")
    for name in ("closed-in200-out8-p32", "closed-in200-out8-p48"):
        assert ran[name].stop == "skipped" and ran[name].requests == 0 and not records(run, name)
        assert ran[name].detail == f"not run: the server saturated at 24 parallel ({saturated.saturated})"
        assert ran[name].started_unix is None
    brief = ran["closed-in250-out32-p8"]
    assert brief.stop == "minimum reached" and brief.saturated is None, brief
    waiting = [s.value("vllm:num_requests_waiting") for s in run.scrapes
               if brief.started_unix <= s.t <= brief.ended_unix]
    assert any(waiting) and sum(1 for w in waiting if w) < len(waiting) / 2  # seen waiting, but not persistently
    waves = ran["waves-in200-out57"]
    assert waves.sizes == [1, 2, 4, 8, 16, 20, 18, 17]  # double, then bisect
    assert waves.stop == "saturated" and waves.detail == f"between waves of {capacity} and {capacity + 1}"
    assert waves.requests == sum(waves.sizes) == len(records(run, waves.name))


def test_ingestion_and_batch_stop_once_their_interval_is_within_target():
    suite = points(
        "- {kind: ingest, min_prompt_tokens: 16, max_prompt_tokens: 4000, points: 6, repeats: 5, target_ci: 0.15}\n"
        "- {kind: batch, prompt_tokens: 64, output_tokens: 16, batch_sizes: [4], warmups: 1, runs: 3, "
        "target_ci: 0.0001, max_runs: 5}\n")
    run = drive(suite, CONFIG, perf=STEADY, options=DriveOptions(step_jitter=0.05, seed=2))
    ingest, batch = run.points
    sweeps = {r.repeat for r in records(run, "ingest")}
    assert ingest.stop == "precision reached" and len(sweeps) < 5, ingest  # a few sweeps, not all five
    assert ingest.requests == 6 * len(sweeps) and f"after {len(sweeps)} sweep" in ingest.detail
    # a target no measurement meets: max_runs measured rounds
    measured = sorted({r.repeat for r in records(run, batch.name) if not r.warmup})
    assert batch.stop == "complete" and measured == [0, 1, 2, 3, 4] and batch.requests == 4 * 6, batch
    assert batch.detail.startswith("the mean decode speed +-") and "after 5 rounds" in batch.detail


def test_run_saturated_runs_the_larger_counts_and_attempts_are_stamped():
    suite = points("- {kind: closed, prompt_tokens: 200, output_tokens: 8, parallel: [2, 24, 32], min_requests: 4}\n")
    options = DriveOptions(scrape_interval_s=0.1)
    skipping = drive(suite, CONFIG, perf=SMALL_KV, options=options)
    running = drive(suite, CONFIG, perf=SMALL_KV, options=options, run_saturated=True,
                    attempts={"closed-in200-out8-p24": 2})
    assert [p.stop for p in skipping.points] == ["minimum reached", "minimum reached", "skipped"]
    assert [p.stop for p in running.points] == ["minimum reached", "minimum reached", "minimum reached"]
    assert [p.saturated is not None for p in running.points] == [False, True, True]
    assert [p.requests for p in running.points] == [4, 24, 32]
    assert [p.attempt for p in running.points] == [0, 2, 0]
    assert {(r.scenario, r.attempt) for r in running.records} == {
        ("closed-in200-out8-p2", 0), ("closed-in200-out8-p24", 2), ("closed-in200-out8-p32", 0)}


def test_a_barrier_kind_runs_whole_on_the_first_process_and_the_others_say_complete():
    suite = points("- {kind: ingest, prompt_tokens: [16, 256, 1024], repeats: 2}\n"
                   "- {kind: open, prompt_tokens: 64, output_tokens: 8, rates: [20], num_requests: 10}\n")
    run = drive(suite, CONFIG, perf=STEADY, options=DriveOptions(processes=3))
    ingest, open_loop = run.points
    assert {r.worker for r in records(run, "ingest")} == {"worker-0"} and ingest.stop == "complete"
    assert ingest.requests == 6
    workers = [r.worker for r in records(run, open_loop.name)]
    assert sorted(workers.count(f"worker-{i}") for i in range(3)) == [3, 3, 4]  # every process its share
