"""The real load engine obeys the points' stopping rules (``cardgen.points``) against the virtual server: a
closed loop stops on precision (judged where every agent's records meet), a saturated pair leaves out its
larger counts, waves bisect to the KV capacity, ingestion and batch stop on their intervals, and every point
ends in run.json with why it stopped."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from loadkit import FIXED, build, read_records, sim_server
from test_agent import run_in_load_process

PLANRUN = Path(__file__).with_name("planrun.py")
# 30 ms steps: the server's own step times dwarf the few milliseconds a busy test machine adds to each request
STEADY = {**FIXED, "step_overhead_s": 0.03}
PRECISION_SUITE = ("name: t\nscenarios:\n- {{kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: 4, "
                   "min_requests: 20, max_requests: {cap}, target_ci: 0.03}}\n")
# 4096 tokens of KV cache (256 blocks of 16); one prompt prefilled per step
# a prefill budget for both of a 2-user point's 200-token prompts at once: with 256 tokens a step the second of two
# prompts sent in the same instant (every round of a closed loop in lockstep) waits one step, and in a point this
# short one scrape that sees it is "waiting in half the readings"; these tests are about the KV cache
SMALL_KV = {**FIXED, "kv_capacity_tokens": 4096, "max_num_batched_tokens": 512}


def points_of(run_dir: Path) -> dict[str, dict]:
    return {p["name"]: p for p in json.loads((run_dir / "run.json").read_text())["points"]}


@contextmanager
def noisy_neighbours(url: str, *, threads: int = 2, rate_rps: float = 3.0) -> Iterator[None]:
    """Other clients sharing the server: long prompts (2,000 to 8,000 tokens, one output token) at random
    times (Poisson, seeded). Each one's prefill takes a step of its own, so the benchmark's requests are
    delayed by a random amount: a noisy server."""
    stop = threading.Event()

    def neighbour(seed: int) -> None:
        rng = random.Random(seed)
        session = requests.Session()
        while not stop.wait(rng.expovariate(rate_rps)):
            prompt = "w " * rng.randint(2000, 8000)
            try:
                session.post(f"{url}/v1/completions", json={"model": "test-model", "prompt": prompt, "max_tokens": 1},
                             timeout=30)
            except requests.RequestException:
                pass

    workers = [threading.Thread(target=neighbour, args=(seed,), daemon=True) for seed in range(threads)]
    for w in workers:
        w.start()
    try:
        yield
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=35)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_closed_point_stops_on_precision_before_its_cap_on_a_steady_server(tmp_path, write_suite, workers):
    suite = write_suite(PRECISION_SUITE.format(cap=120))  # about 30 requests are enough; 120 leave a margin
    with sim_server(tmp_path, fixed=STEADY) as (sim, stamps):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "run"),
                     "--workers", workers)
    assert proc.returncode == 0, proc.stderr
    point = points_of(tmp_path / "run")["closed-in64-out16-p4"]
    records = read_records(tmp_path / "run")
    assert point["stop"] == "precision reached", point
    assert 20 <= point["requests"] == len(records) < 120
    assert point["detail"].startswith("speed from start +-") and "(target +-3%)" in point["detail"]
    assert point["saturation"] is None and point["attempt"] == 0
    if workers == "2":  # decided on the records of both workers, and both stopped
        assert {r["worker"] for r in records} == {"worker-0", "worker-1"}


def test_a_closed_point_runs_to_its_cap_on_a_noisy_server(tmp_path, write_suite):
    suite = write_suite(PRECISION_SUITE.format(cap=60))
    with sim_server(tmp_path, fixed=STEADY) as (sim, _), noisy_neighbours(sim.url):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    point = points_of(tmp_path / "run")["closed-in64-out16-p4"]
    assert point["stop"] == "max_requests", point
    assert point["requests"] == len(read_records(tmp_path / "run")) == 60
    assert point["detail"].startswith("max_requests 60 reached first: speed from start +-")


def test_a_saturated_pair_skips_its_larger_counts_and_waves_bracket_the_kv_capacity(tmp_path, write_suite):
    prompt, output = 200, 57  # 256 tokens at the end: 16 blocks, so exactly 16 requests fit the 256 blocks
    capacity = (SMALL_KV["kv_capacity_tokens"] // 16) // -(-(prompt + output - 1) // 16)
    suite = write_suite(
        "name: t\nscenarios:\n"
        "- {kind: closed, prompt_tokens: 200, output_tokens: 8, parallel: [2, 24, 32, 48], min_requests: 4}\n"
        # every round starts with 8 prompts prefilled one step each: requests wait briefly, then none do
        "- {kind: closed, prompt_tokens: 250, output_tokens: 32, parallel: 8, min_requests: 80}\n"
        f"- {{kind: waves, prompt_tokens: {prompt}, output_tokens: {output}, max_wave: 20}}\n")
    out = tmp_path / "run"
    with sim_server(tmp_path, fixed=SMALL_KV) as (sim, _):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(out),
                     "--scrape-interval", "0.1")
    assert proc.returncode == 0, proc.stderr
    points = points_of(out)
    records = read_records(out)
    assert list(points) == ["closed-in200-out8-p2", "closed-in200-out8-p24", "closed-in200-out8-p32",
                            "closed-in200-out8-p48", "closed-in250-out32-p8", "waves-in200-out57"]
    assert points["closed-in200-out8-p2"]["saturation"] is None
    saturated = points["closed-in200-out8-p24"]
    # it stopped for its own reason; its saturation is said beside it
    assert saturated["stop"] == "minimum reached" and saturated["saturation"].startswith("KV cache")
    for name in ("closed-in200-out8-p32", "closed-in200-out8-p48"):
        assert points[name]["stop"] == "skipped" and points[name]["requests"] == 0
        assert points[name]["detail"] == f"not run: the server saturated at 24 parallel ({saturated['saturation']})"
        assert points[name]["started_unix"] is None and not any(r["scenario"] == name for r in records)

    brief = points["closed-in250-out32-p8"]
    assert brief["stop"] == "minimum reached" and brief["saturation"] is None, brief
    scrapes = [json.loads(line) for line in (out / "server_metrics.jsonl").read_text().splitlines()]
    waiting = [s["samples"]["vllm:num_requests_waiting"][0]["value"] for s in scrapes
               if brief["started_unix"] <= s["t"] <= brief["ended_unix"] and "samples" in s]
    assert any(waiting) and sum(1 for w in waiting if w) < len(waiting) / 2  # seen waiting, but not persistently

    waves = points["waves-in200-out57"]
    sizes = list(dict.fromkeys(r["wave"] for r in records if r["scenario"] == "waves-in200-out57"))
    assert sizes == [1, 2, 4, 8, 16, 20, 18, 17]  # double, then bisect
    assert waves["stop"] == "saturated" and waves["detail"] == f"between waves of {capacity} and {capacity + 1}"
    assert waves["requests"] == sum(sizes)


def test_ingestion_and_batch_stop_once_their_interval_is_within_target(tmp_path, write_suite):
    suite = write_suite(
        "name: t\nscenarios:\n"
        "- {kind: ingest, min_prompt_tokens: 16, max_prompt_tokens: 4000, points: 6, repeats: 5, target_ci: 0.15}\n"
        "- {kind: batch, prompt_tokens: 64, output_tokens: 16, batch_sizes: [4], warmups: 1, runs: 3, "
        "target_ci: 0.0001, max_runs: 5}\n")
    with sim_server(tmp_path) as (sim, _):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    points = points_of(tmp_path / "run")
    records = read_records(tmp_path / "run")
    ingest = points["ingest"]
    sweeps = {r["repeat"] for r in records if r["scenario"] == "ingest"}
    assert ingest["stop"] == "precision reached" and len(sweeps) < 5, ingest  # a few sweeps, not all five
    assert ingest["requests"] == 6 * len(sweeps) and f"after {len(sweeps)} sweeps" in ingest["detail"]
    batch = points["batch-in64-out16-b4"]  # a target no real measurement meets: max_runs measured rounds
    measured = sorted({r["repeat"] for r in records if r["scenario"] == batch["name"] and not r["warmup"]})
    assert batch["stop"] == "complete" and measured == [0, 1, 2, 3, 4] and batch["requests"] == 4 * 6, batch
    assert batch["detail"].startswith("the mean decode speed +-") and "after 5 rounds" in batch["detail"]


def planrun(url: str, suite: Path, out: Path, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, str(PLANRUN), url, str(suite), str(out), *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_run_saturated_runs_the_larger_counts_and_attempts_are_stamped(tmp_path, write_suite):
    suite = write_suite("name: t\nscenarios:\n"
                        "- {kind: closed, prompt_tokens: 200, output_tokens: 8, parallel: [2, 24, 32], "
                        "min_requests: 4}\n")
    with sim_server(tmp_path, fixed=SMALL_KV) as (sim, _):
        skipping = planrun(sim.url, suite, tmp_path / "a")
        running = planrun(sim.url, suite, tmp_path / "b", "--run-saturated",
                          "--attempts", json.dumps({"closed-in200-out8-p24": 2}))
    assert [p["stop"] for p in skipping] == ["minimum reached", "minimum reached", "skipped"]
    assert [p["stop"] for p in running] == ["minimum reached", "minimum reached", "minimum reached"]
    assert [p["saturation"] is not None for p in running] == [False, True, True]
    assert [p["requests"] for p in running] == [4, 24, 32]
    assert [p["attempt"] for p in running] == [0, 2, 0]
    attempts = {(r["scenario"], r["attempt"]) for r in read_records(tmp_path / "b")}
    assert attempts == {("closed-in200-out8-p2", 0), ("closed-in200-out8-p24", 2), ("closed-in200-out8-p32", 0)}


def test_requests_that_wait_only_briefly_are_not_saturation():
    run_in_load_process("""
        from cardgen.saturation import Reading as R, closed_load_seen, point_saturation

        def seen(waiting):
            readings = [R(t=float(t), usage=0.5, waiting=w, preemptions=3.0) for t, w in enumerate(waiting)]
            return closed_load_seen(readings, started=0.0, ended=len(waiting), first_round_end=2.0,
                                    median_speed_tok_s=50.0)

        # all users' prefills queue at the start (before the first round ended), and now and then after it
        assert point_saturation(seen([8, 6, 0, 0, 3, 0, 0, 0, 2, 0])) is None
        # waiting in half the readings after the first round: persistent
        assert seen([8, 6, 0, 4, 3, 0, 0, 5, 2, 0]).waiting_max == 5
        assert "5 requests waiting in 50% of readings" in point_saturation(seen([8, 6, 0, 4, 3, 0, 0, 5, 2, 0]))
        assert seen([0] * 10).preemptions == 0 and seen([0] * 10).kv_usage_max == 0.5
    """)


def test_build_run_saturated_flag_runs_every_count(tmp_path, write_suite):
    suite = write_suite("name: t\nscenarios:\n"
                        "- {kind: closed, prompt_tokens: 200, output_tokens: 8, parallel: [2, 24, 32], "
                        "min_requests: 4}\n")
    with sim_server(tmp_path, fixed=SMALL_KV) as (sim, _):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "run"),
                     "--scrape-interval", "0.1", "--run-saturated")
    assert proc.returncode == 0, proc.stderr
    points = points_of(tmp_path / "run")
    assert points["closed-in200-out8-p24"]["saturation"] is not None
    assert points["closed-in200-out8-p32"]["stop"] != "skipped" and points["closed-in200-out8-p32"]["requests"] > 0
