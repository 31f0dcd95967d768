"""The scheduler in virtual time: exact figures with FixedPerf."""

from __future__ import annotations

import pytest

from cardgen.sim.perf import FixedPerf
from cardgen.sim.virtual import (
    VirtualServer,
    simulate_arrivals,
    simulate_closed_loop,
    simulate_open_loop,
    simulate_single,
    simulate_waves,
)

P = FixedPerf(prefill_tok_s=20_000.0, step_overhead_s=0.01, per_seq_s=0.0002)


def test_single_request_ttft_and_decode() -> None:
    r = simulate_single(P, prompt_tokens=1000, output_tokens=50)
    assert r.ttft_s == pytest.approx(0.01 + 1000 / 20_000)
    assert r.tpot_s == pytest.approx(0.01 + 0.0002)
    assert r.e2e_s == pytest.approx(r.ttft_s + 49 * (0.01 + 0.0002))
    assert r.output_tokens == 50 and r.queue_s == 0


def test_closed_loop_throughput_matches_step_times() -> None:
    # 4 identical users in lock-step: one prefill step for the 4 prompts, then 99 decode steps at batch 4
    users, prompt, out, rounds = 4, 500, 100, 3
    reqs = simulate_closed_loop(
        P, prompt_tokens=prompt, output_tokens=out, parallel=users, num_requests=users * rounds
    )
    round_s = (0.01 + users * prompt / 20_000) + (out - 1) * (0.01 + users * 0.0002)
    makespan = max(r.end for r in reqs)
    assert makespan == pytest.approx(rounds * round_s)
    assert sum(r.output_tokens for r in reqs) / makespan == pytest.approx(users * out / round_s)
    assert [r.index for r in reqs] == list(range(users * rounds))
    assert all(
        r.sent == pytest.approx(k * round_s) for k in range(rounds) for r in reqs[k * users : (k + 1) * users]
    )


def test_closed_loop_keeps_parallel_in_flight() -> None:
    reqs = simulate_closed_loop(P, prompt_tokens=100, output_tokens=20, parallel=3, num_requests=10)
    for r in reqs:
        in_flight = sum(1 for q in reqs if q.sent <= r.sent < q.end)
        assert in_flight <= 3
    assert len(reqs) == 10


def test_arrivals_while_a_step_runs_wait_for_the_next_step() -> None:
    # the second request arrives mid-way through the first one's prefill step
    first_step = 0.01 + 2000 / 20_000
    reqs = simulate_arrivals(P, [(0.0, 2000, 2), (first_step / 2, 100, 2)])
    assert reqs[1].sent == pytest.approx(first_step / 2)
    assert reqs[1].scheduled == pytest.approx(first_step)
    assert reqs[1].first_token == pytest.approx(first_step + 0.01 + 100 / 20_000)


def test_open_loop_far_apart_is_like_single() -> None:
    single = simulate_single(P, prompt_tokens=256, output_tokens=8)
    reqs = simulate_open_loop(P, prompt_tokens=256, output_tokens=8, rate_rps=0.01, num_requests=5, seed=1)
    for r in reqs:
        assert r.ttft_s == pytest.approx(single.ttft_s)
        assert r.e2e_s == pytest.approx(single.e2e_s)


def test_waves_and_kv_trace() -> None:
    small = FixedPerf(kv_capacity_tokens=64 * 16, block_size=16)
    reqs = simulate_waves(small, prompt_tokens=100, output_tokens=20, waves=[1, 2, 3], gap_s=0.5)
    assert [sum(1 for r in reqs if r.group == k) for k in range(3)] == [1, 2, 3]
    for k in (1, 2):
        prev_end = max(r.end for r in reqs if r.group == k - 1)
        assert all(r.sent == pytest.approx(prev_end + 0.5) for r in reqs if r.group == k)

    sim = VirtualServer(small, trace=True)
    for _ in range(3):
        sim.submit(100, 20)
    sim.run()
    # 3 sequences of up to 119 tokens: 8 blocks each at the end
    assert sim.max_kv_usage == pytest.approx(3 * 8 / 64)
    assert sim.trace is not None and sim.trace[-1].running == 0
