"""The continuous-batching scheduler: admission, limits, preemption by recompute, KV accounting, FIFO order,
chunked prefill."""

from __future__ import annotations

import random

import pytest

from cardgen.sim.perf import FixedPerf, SeqWork
from cardgen.sim.scheduler import Scheduler, Seq, SeqStatus, Step


def perf(**kw: float) -> FixedPerf:
    base = {"prefill_tok_s": 10_000.0, "step_overhead_s": 0.01, "per_seq_s": 0.001, "block_size": 16}
    return FixedPerf(**{**base, **kw})  # type: ignore[arg-type]


def check_kv(s: Scheduler) -> None:
    """Blocks are conserved and each sequence holds exactly what its KV cache needs."""
    assert 0 <= s.free_blocks <= s.total_blocks
    held = sum(q.blocks for q in s.running)
    assert held == s.used_blocks
    for q in s.running:
        assert q.blocks == s.blocks_for(q.computed)
    for q in s.waiting:
        assert q.blocks == 0 and q.computed == 0


def run(s: Scheduler, *, max_steps: int = 100_000) -> list[Step]:
    steps = []
    t = 0.0
    while s.has_work:
        step = s.next_step(t)
        assert step is not None
        check_kv(s)
        s.finish_step(step)
        check_kv(s)
        t = step.end_s
        steps.append(step)
        assert len(steps) < max_steps
    return steps


def test_admission_while_blocks_last() -> None:
    s = Scheduler(perf(kv_capacity_tokens=160))  # 10 blocks
    seqs = [s.add(Seq(32, 8)) for _ in range(5)]  # 2 blocks each, +1 block of headroom once something runs
    step = s.next_step()
    assert step is not None and step.kind == "prefill"
    assert step.prefill == seqs[:4]
    assert list(s.waiting) == seqs[4:]
    assert s.free_blocks == 2
    check_kv(s)


def test_lone_request_needs_no_headroom() -> None:
    s = Scheduler(perf(kv_capacity_tokens=64))  # 4 blocks
    seq = s.add(Seq(60, 4))  # 4 blocks at the end
    run(s)
    assert seq.output_tokens == 4 and seq.finish_reason == "length"
    assert s.free_blocks == s.total_blocks


def test_request_that_can_never_fit_is_refused() -> None:
    s = Scheduler(perf(kv_capacity_tokens=64))
    with pytest.raises(ValueError, match="exceed the KV cache"):
        s.add(Seq(60, 8))


def test_max_num_seqs() -> None:
    s = Scheduler(perf(max_num_seqs=3))
    for _ in range(5):
        s.add(Seq(10, 20))
    step = s.next_step()
    assert step is not None and len(step.prefill) == 3
    s.finish_step(step)
    for _ in range(30):
        step = s.next_step()
        if step is None:
            break
        assert len(s.running) <= 3
        s.finish_step(step)


def test_prefill_token_budget_and_oversized_prompt() -> None:
    s = Scheduler(perf(max_num_batched_tokens=100))
    a, b, c = s.add(Seq(40, 2)), s.add(Seq(40, 2)), s.add(Seq(40, 2))
    step = s.next_step()
    assert step is not None and step.prefill == [a, b] and step.prefill_tokens == [40, 40]
    s.finish_step(step)
    step = s.next_step()  # prefill first: the waiting prompt goes before the decodes
    assert step is not None and step.prefill == [c] and not step.decode
    s.finish_step(step)

    s = Scheduler(perf(max_num_batched_tokens=100))
    big, small = s.add(Seq(150, 2)), s.add(Seq(10, 2))
    step = s.next_step()
    assert step is not None and step.prefill == [big]  # admitted alone, over the budget
    assert list(s.waiting) == [small]


def test_step_time_comes_from_the_perf_model() -> None:
    p = perf()
    s = Scheduler(p)
    a, b = s.add(Seq(100, 5)), s.add(Seq(300, 5))
    step = s.next_step(1.0)
    assert step is not None
    assert step.start_s == 1.0
    assert step.duration_s == pytest.approx(0.01 + 400 / 10_000)
    s.finish_step(step)
    assert a.first_token_s == b.first_token_s == pytest.approx(1.0 + 0.05)
    step = s.next_step(step.end_s)
    assert step is not None and step.kind == "decode" and step.decode == [a, b]
    assert step.duration_s == pytest.approx(0.01 + 2 * 0.001)
    assert (a.computed, b.computed) == (101, 301)


def test_preemption_by_recompute_when_kv_is_full() -> None:
    s = Scheduler(perf(kv_capacity_tokens=6 * 16))  # 6 blocks
    first, second = s.add(Seq(32, 40)), s.add(Seq(32, 40))
    step = s.next_step()
    assert step is not None and step.prefill == [first, second]
    s.finish_step(step)
    preempted_at = None
    for _ in range(200):
        step = s.next_step()
        assert step is not None
        check_kv(s)
        if step.preempted:
            preempted_at = step
            break
        s.finish_step(step)
    assert preempted_at is not None
    # the most recently admitted sequence goes, back to the front of the queue, its KV forgotten
    assert preempted_at.preempted == [second]
    assert second.status == SeqStatus.WAITING and s.waiting[0] is second
    assert second.blocks == 0 and second.computed == 0 and second.preemptions == 1
    assert s.num_preemptions == 1
    assert preempted_at.decode == [first]
    generated = second.output_tokens
    s.finish_step(preempted_at)
    # on re-admission it recomputes its prompt and every token it had generated
    while True:
        step = s.next_step()
        assert step is not None
        if second in step.prefill:
            assert step.prefill_tokens[step.prefill.index(second)] == 32 + generated
            assert step.prefill[0] is second
            break
        s.finish_step(step)
    s.finish_step(step)
    run(s)
    assert first.output_tokens == second.output_tokens == 40
    assert s.free_blocks == s.total_blocks
    assert s.finished_total["length"] == 2


@pytest.mark.parametrize("chunked", [False, True])
def test_kv_accounting_under_pressure(chunked: bool) -> None:
    rng = random.Random(7)
    s = Scheduler(
        perf(kv_capacity_tokens=40 * 16, max_num_seqs=12, max_num_batched_tokens=256), chunked_prefill=chunked
    )
    seqs = [s.add(Seq(rng.randint(1, 200), rng.randint(1, 120))) for _ in range(60)]
    steps = run(s)
    assert s.num_preemptions > 0  # the workload really did fill the cache
    assert s.free_blocks == s.total_blocks and not s.running and not s.waiting
    for q in seqs:
        assert q.finished and q.output_tokens == q.max_tokens and q.blocks == 0
    assert s.generation_tokens_total == sum(q.max_tokens for q in seqs)
    assert s.prompt_tokens_total == sum(q.prompt_tokens for q in seqs)
    for step in steps:
        assert len(step.prefill) + len(step.decode) <= 12
        if chunked:
            assert sum(step.prefill_tokens) + len(step.decode) <= 256


def test_fifo_no_overtaking() -> None:
    s = Scheduler(perf(max_num_seqs=2))
    seqs = [s.add(Seq(10 + i, 5)) for i in range(6)]
    run(s)
    firsts = [q.first_token_s for q in seqs]
    assert firsts == sorted(firsts)
    assert [q.scheduled_s for q in seqs] == sorted(q.scheduled_s for q in seqs)  # type: ignore[type-var]

    # a small request behind one that does not fit waits its turn
    s = Scheduler(perf(kv_capacity_tokens=10 * 16))
    s.add(Seq(100, 40))  # 7 blocks
    s.finish_step(s.next_step())  # type: ignore[arg-type]
    big, small = s.add(Seq(60, 2)), s.add(Seq(5, 2))  # big needs 4 + 1 > 3 free; small would fit
    step = s.next_step()
    assert step is not None and step.kind == "decode"
    assert list(s.waiting) == [big, small]


def test_chunked_prefill_budget_and_mixed_steps() -> None:
    s = Scheduler(perf(max_num_batched_tokens=64), chunked_prefill=True)
    a = s.add(Seq(100, 3))
    step = s.next_step()
    assert step is not None and step.prefill == [a] and step.prefill_tokens == [64]
    assert s.finish_step(step) == []  # no token before the whole prompt is computed
    step = s.next_step()
    assert step is not None and step.prefill_tokens == [36]
    assert s.finish_step(step) == [a] and a.output_tokens == 1
    b = s.add(Seq(200, 3))
    step = s.next_step()
    assert step is not None and step.kind == "mixed"
    assert step.decode == [a] and step.prefill == [b] and step.prefill_tokens == [63]
    s.finish_step(step)
    run(s)
    assert a.output_tokens == b.output_tokens == 3


def test_stop_at_and_abort() -> None:
    s = Scheduler(perf())
    stopper = s.add(Seq(10, 50, stop_at=4))
    gone = s.add(Seq(10, 50))
    s.finish_step(s.next_step())  # type: ignore[arg-type]
    s.abort(gone, 1.0)
    assert gone.status == SeqStatus.ABORTED and gone.blocks == 0
    run(s)
    assert stopper.output_tokens == 4 and stopper.finish_reason == "stop"
    assert s.finished_total == {"length": 0, "stop": 1, "abort": 1}
    assert s.free_blocks == s.total_blocks


def test_abort_while_the_step_is_in_flight() -> None:
    s = Scheduler(perf())
    a, b = s.add(Seq(10, 5)), s.add(Seq(10, 5))
    step = s.next_step()
    s.abort(b)
    assert step is not None and s.finish_step(step) == [a]
    assert s.used_blocks == a.blocks


def test_a_decode_factor_slows_the_decode_steps_it_is_in_and_leaves_prefill_as_it_was():
    perf = FixedPerf(prefill_tok_s=10_000.0, step_overhead_s=0.010, per_seq_s=0.001)

    def steps(factor: float) -> list[tuple[str, float]]:
        sched = Scheduler(perf)
        sched.add(Seq(100, 3, decode_factor=factor))
        out = []
        while (step := sched.next_step(0.0)) is not None:
            out.append((step.kind, step.duration_s))
            sched.finish_step(step)
        return out

    plain, slowed = steps(1.0), steps(1.5)
    assert [k for k, _ in plain] == [k for k, _ in slowed] == ["prefill", "decode", "decode"]
    assert slowed[0][1] == pytest.approx(plain[0][1])  # the prompt's step: no mask
    decode = perf.step_time_s([], [SeqWork(1, 100)])
    assert [d for _, d in slowed[1:]] == pytest.approx([1.5 * decode] * 2)


def test_a_step_waits_for_its_slowest_sequence():
    perf = FixedPerf(step_overhead_s=0.010, per_seq_s=0.001)
    sched = Scheduler(perf)
    sched.add(Seq(10, 2))
    sched.add(Seq(10, 2, decode_factor=1.25))
    first = sched.next_step(0.0)
    assert first is not None and first.kind == "prefill"
    sched.finish_step(first)
    step = sched.next_step(first.end_s)
    assert step is not None and len(step.decode) == 2
    assert step.duration_s == pytest.approx(1.25 * perf.step_time_s([], [SeqWork(1, 10), SeqWork(1, 10)]))
