"""Steps that only decode, applied at once (``Scheduler.decode_run``), give what the same steps one by one give: the
same records, scrapes, counters and KV peaks to the last bit, under every condition that ends a run of them
(arrivals, scrapes, a finishing request, a new KV block that is not free, a full batch with a queue, prefix-cached
prompts, a watched point, jittered steps). Each case is driven twice, once with a performance model that offers no
uniform decode time (so every step goes the general way), and the runs are compared whole."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cardgen.points import Point, expand
from cardgen.schemas.records import metric_line
from cardgen.sim.config import SimConfig, build_perf
from cardgen.sim.drive import Drive, DriveOptions, drive
from cardgen.sim.perf import FixedPerf, PerfModel, SeqWork
from cardgen.sim.scheduler import Scheduler, Seq
from cardgen.sim.served import ServedModel
from cardgen.suite import parse_suite


class StepByStep:
    """``perf`` without ``uniform_decode_s`` or ``summed_step_s``: no decode run can be taken, and every step is
    priced from its work, a SeqWork per sequence."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf
        self.kv_capacity_tokens, self.block_size = perf.kv_capacity_tokens, perf.block_size
        self.max_num_seqs, self.max_num_batched_tokens = perf.max_num_seqs, perf.max_num_batched_tokens

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        return self.perf.step_time_s(prefill, decode)

    def describe(self) -> dict[str, object]:
        return self.perf.describe()

    def __getattr__(self, name: str) -> Any:
        if name in ("uniform_decode_s", "summed_step_s"):
            raise AttributeError(name)
        return getattr(self.perf, name)


def points(yaml: str) -> list[Point]:
    return expand(parse_suite(f"name: t\nscenarios:\n{yaml}", source="test suite"))


def both(pts: list[Point], config: SimConfig, perf: PerfModel, options: DriveOptions) -> tuple[Drive, Drive]:
    return (drive(pts, config, perf=perf, options=options),
            drive(pts, config, perf=StepByStep(perf), options=options))


def assert_same(fast: Drive, slow: Drive) -> None:
    assert [d.record.model_dump_json() for d in fast.requests] == [d.record.model_dump_json() for d in slow.requests]
    assert [metric_line(s) for s in fast.scrapes] == [metric_line(s) for s in slow.scrapes]
    assert [p.outcome() for p in fast.points] == [p.outcome() for p in slow.points]
    a, b = fast.server.scheduler, slow.server.scheduler
    for counter in ("num_steps", "num_preemptions", "prompt_tokens_total", "generation_tokens_total",
                    "prefix_queries", "prefix_hits", "cache_evictions", "free_blocks", "evictable"):
        assert getattr(a, counter) == getattr(b, counter), counter
    assert a.finished_total == b.finished_total
    assert fast.server.max_kv_usage == slow.server.max_kv_usage
    assert b.decode_run_steps == 0  # the general way only


JITTERY = DriveOptions(network_s=0.001, read_jitter_s=0.0002, step_jitter=0.05, seed=3, scrape_interval_s=0.25)
SMALL_KV = FixedPerf(prefill_tok_s=8000.0, step_overhead_s=0.008, per_seq_s=0.0004, kv_capacity_tokens=2048,
                     max_num_seqs=16)

CASES = {
    # the watched closed loop at three sizes: steps interrupted by arrivals, scrapes and requests that finish
    "closed": ("  - kind: closed\n    prompt_tokens: [256]\n    output_tokens: [64]\n    parallel: [1, 8, 32]\n"
               "    min_requests: 40\n", SimConfig(model="CodeLlama-7b", gpu="A100-80GB")),
    # Poisson arrivals: a queue that empties and fills
    "open": ("  - kind: open\n    prompt_tokens: 512\n    output_tokens: 96\n    rates: [4, 40]\n"
             "    num_requests: 60\n", SimConfig(model="CodeLlama-7b", gpu="A100-80GB")),
    # prefill first (a step prefills or decodes): after a prefill, the batch's last tokens differ by its time, and
    # a run's first step has a gap of its own for each sequence
    "prefill first": ("  - kind: open\n    prompt_tokens: 512\n    output_tokens: 96\n    rates: [8, 40]\n"
                      "    num_requests: 60\n", SimConfig(model="CodeLlama-7b", gpu="A100-80GB", chunked_prefill=False)),
    # chunked prefill, and a trace's prompts that share blocks in the prefix cache, replayed at its own times
    "chunked, shared blocks": ("  - kind: open\n    dataset: mooncake-sample\n    max_requests: 80\n",
                               SimConfig(model="CodeLlama-7b", gpu="A100-80GB", chunked_prefill=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_driven_run_is_the_same_with_decode_runs_as_step_by_step(case: str) -> None:
    yaml, config = CASES[case]
    fast, slow = both(points(yaml), config, build_perf(config), JITTERY)
    assert_same(fast, slow)
    sched = fast.server.scheduler
    assert sched.decode_run_steps > sched.num_steps / 4  # runs were taken, and a good share of the steps


def test_kv_pressure_preemption_and_a_full_batch_with_a_queue_end_runs_as_the_general_way_would() -> None:
    """A KV cache of 128 blocks for 16 sequences of up to 320 tokens: runs end where a new block is not free
    (the general way preempts), and while 16 run and more wait."""
    pts = points("  - kind: closed\n    prompt_tokens: [192]\n    output_tokens: [128]\n    parallel: [24]\n"
                 "    min_requests: 48\n")
    config = SimConfig(model="m", perf="fixed")
    fast, slow = both(pts, config, SMALL_KV, JITTERY)
    assert_same(fast, slow)
    assert fast.server.scheduler.num_preemptions > 0
    assert fast.server.scheduler.decode_run_steps > 0


def test_a_decode_run_ends_with_the_step_that_finishes_a_sequence_and_leaves_the_one_past_its_horizon_planned():
    sched = Scheduler(FixedPerf(step_overhead_s=0.01, per_seq_s=0.0), prefix_caching=False)
    a, b = Seq(100, 10), Seq(100, 4)
    sched.add(a), sched.add(b)
    step = sched.next_step(0.0)  # the prefill: both get their first token at 0.01 + 200 / 20000 = 0.02
    assert step is not None and sched.finish_step(step) == [a, b]
    free = sched.free_blocks
    run = sched.decode_run(step.end_s, horizon_s=10.0)
    assert run is not None and run.in_flight is None
    assert len(run.ends) == 3 and run.ends == pytest.approx([0.03, 0.04, 0.05])  # b's last token is the third
    assert run.finished == [b] and b.finish_reason == "length" and b.end_s == run.ends[-1] and b.blocks == 0
    assert (a.output_tokens, b.output_tokens) == (4, 4) and a.computed == 103 and a.finish_reason is None
    assert sched.running == [a] and sched.finished_total["length"] == 1
    assert sched.free_blocks == free + 7 and sched.used_blocks == a.blocks == 7  # b's 7 blocks given back
    run = sched.decode_run(run.ends[-1], horizon_s=run.ends[-1] + 0.025)  # a alone: 2 steps before the horizon
    assert run is not None and len(run.ends) == 2 and run.finished == []
    assert run.in_flight is not None and run.in_flight.decode == [a]  # the third is planned, in flight
    assert run.in_flight.end_s >= 0.075
    with pytest.raises(RuntimeError):
        sched.next_step(run.in_flight.start_s)
    assert sched.finish_step(run.in_flight) == [a] and a.output_tokens == 7
    run = sched.decode_run(0.08, horizon_s=10.0)  # a's last 3 tokens: the run that finishes it
    assert run is not None and run.finished == [a] and a.output_tokens == 10 and not sched.running
    assert sched.used_blocks == 0 and sched.decode_run(run.ends[-1], horizon_s=10.0) is None  # nothing runs


@pytest.mark.parametrize(("model", "gpu", "tp"), [("CodeLlama-7b", "A100-80GB", 1), ("Llama-3.1-70B", "H100", 4),
                                                  ("Mixtral-8x7B", "H100", 2)])
def test_a_steps_time_from_its_sums_is_its_time_from_its_work_to_the_last_bit(model: str, gpu: str, tp: int) -> None:
    perf = build_perf(SimConfig(model=model, gpu=gpu, tp=tp))
    rng = random.Random(7)
    for _ in range(2000):
        prefill = [SeqWork(rng.randint(1, 8192), rng.choice([0, rng.randint(0, 30000)])) for _ in range(rng.randint(0, 3))]
        decode = [SeqWork(1, rng.randint(0, 60000)) for _ in range(rng.choice([0, 1, rng.randint(1, 256)]))]
        if not prefill and not decode:
            continue
        work = prefill + decode
        sums = (sum(w.new_tokens for w in work), len(work),
                sum(w.new_tokens * w.context_tokens + w.new_tokens * (w.new_tokens + 1) // 2 for w in work),
                sum(w.context_tokens for w in work))
        assert perf.summed_step_s(*sums) == perf.step_time_s(prefill, decode)
        if decode:
            assert perf.uniform_decode_s(len(decode), sum(w.context_tokens for w in decode)) == \
                perf.step_time_s([], decode)


def test_no_time_from_sums_where_a_term_is_cut_or_an_adapter_counts() -> None:
    windowed = build_perf(SimConfig(model="Mistral-7B", gpu="A100-80GB"))
    assert windowed.summed_step_s(10, 1, 55, 0) is None
    lora = build_perf(SimConfig(model="CodeLlama-7b", gpu="A100-80GB", served=ServedModel.of_options(adapters=("a",), lora_rank=16)))
    assert lora.summed_step_s(10, 1, 55, 0) is None
    plain = build_perf(SimConfig(model="CodeLlama-7b", gpu="A100-80GB"))
    assert plain.summed_step_s(10, 1, 2**53, 0) is None
