"""The scheduler in virtual time: exact figures with FixedPerf."""

from __future__ import annotations

import pytest

from cardgen.sim.drive import simulate_closed_loop
from cardgen.sim.faults import FaultPlan
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import FixedPerf
from cardgen.sim.virtual import VirtualServer, simulate_single

P = FixedPerf(prefill_tok_s=20_000.0, step_overhead_s=0.01, per_seq_s=0.0002)


def test_single_request_ttft_and_decode() -> None:
    r = simulate_single(P, prompt_tokens=1000, output_tokens=50)
    assert r.ttft_s == pytest.approx(0.01 + 1000 / 20_000)
    assert r.tpot_s == pytest.approx(0.01 + 0.0002)
    assert r.e2e_s == pytest.approx(r.ttft_s + 49 * (0.01 + 0.0002))
    assert r.output_tokens == 50 and r.queue_s == 0
    assert len(r.times) == 50 and r.times[0] == r.first_token and r.times[-1] == r.end


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
    sim = VirtualServer(P)
    sim.submit(2000, 2, at=0.0)
    assert sim.start_step() is not None
    sim.submit(100, 2, at=first_step / 2)
    sim.finish_step()
    reqs = sorted(sim.run(), key=lambda r: r.index)
    assert reqs[1].sent == pytest.approx(first_step / 2)
    assert reqs[1].scheduled == pytest.approx(first_step)
    assert reqs[1].first_token == pytest.approx(first_step + 0.01 + 100 / 20_000)


def test_an_idle_server_starts_at_the_first_arrival() -> None:
    sim = VirtualServer(P)
    sim.submit(256, 8, at=5.0)
    (r,) = sim.run()
    single = simulate_single(P, prompt_tokens=256, output_tokens=8)
    assert r.sent == 5.0 and r.ttft_s == pytest.approx(single.ttft_s) and r.e2e_s == pytest.approx(single.e2e_s)


def test_kv_trace() -> None:
    small = FixedPerf(kv_capacity_tokens=64 * 16, block_size=16)
    sim = VirtualServer(small, trace=True)
    for _ in range(3):
        sim.submit(100, 20)
    sim.run()
    # 3 sequences of up to 119 tokens: 8 blocks each at the end
    assert sim.max_kv_usage == pytest.approx(3 * 8 / 64)
    assert sim.trace is not None and sim.trace[-1].running == 0


def test_http500_answers_every_nth_arrival_and_is_counted() -> None:
    metrics = SimMetrics(model_name="m", cache_config=None)
    sim = VirtualServer(P, metrics=metrics, faults=FaultPlan(every={"http500": 3}))
    answered = [sim.arrive(100, 4, at=0.0) is None for _ in range(7)]
    assert answered == [False, False, True, False, False, True, False]
    assert metrics.faults == {"http500": 2}
    assert len(sim.run()) == 5
    assert metrics.ttft.count == metrics.e2e.count == 5 and metrics.itl.count == 5 * 3


def test_faults_that_need_a_connection_are_refused() -> None:
    with pytest.raises(ValueError, match="http500 only"):
        VirtualServer(P, faults=FaultPlan(every={"drop": 2}))
