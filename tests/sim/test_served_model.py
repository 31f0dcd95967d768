"""What the virtual server's model does besides answering, in virtual time: it reasons for the configured share of
every output, speculates at the configured acceptance, and pays for every distinct LoRA adapter of a step; the
card built from such a run says exactly that (acceptance within 2 % of the configured rate, the configured
reasoning tokens)."""

from __future__ import annotations

import json

import pytest
from simruns import simulate

from cardgen.card import render_run
from cardgen.numbers import pct
from cardgen.points import expand
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.lora import LoraServing, lora_params
from cardgen.sim.perf import FixedPerf, SeqWork
from cardgen.sim.reasoning import thinking
from cardgen.sim.roofline import build_perf_model
from cardgen.sim.scheduler import Scheduler, Seq
from cardgen.sim.served import ServedModel
from cardgen.sim.speculation import Speculation, expected_accepted
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

P = FixedPerf(prefill_tok_s=50_000.0, step_overhead_s=0.005, per_seq_s=0.0002, kv_capacity_tokens=65536,
              max_num_seqs=64)


def suite(yaml: str):
    return parse_suite(f"name: t\nscenarios:\n{yaml}", source="test suite")


def config(**served) -> SimConfig:
    return SimConfig(model="m", perf="fixed", served=ServedModel(**served))


# --- reasoning ------------------------------------------------------------------------------------------------

def test_the_reasoning_share_splits_an_output_as_a_parser_and_a_think_span_would():
    chat = thinking(0.25, 128, chat=True)
    assert (chat.reasoning_tokens, chat.last, chat.first_answer, chat.tags) == (32, 32, 33, False)
    span = thinking(0.25, 128, chat=False)  # <think> at 1, 32 words, </think> at 34, the answer from 35
    assert (span.reasoning_tokens, span.last, span.first_answer) == (32, 34, 35)
    assert span.text_of(1, " w") == " <think>" and span.text_of(34, " w") == " </think>"
    assert thinking(1.0, 16, chat=True).first_answer is None  # all reasoning: the answer never starts
    assert thinking(0.0, 16, chat=True).first_answer == 1 and thinking(0.01, 16, chat=True).reasoning_tokens == 0


@pytest.mark.parametrize("endpoint, source", [("chat", "usage"), ("completions", "tokenize")])
def test_records_carry_the_configured_reasoning_and_the_answer_starts_after_it(endpoint, source):
    points = expand(suite(f"""  - kind: closed
    endpoint: {endpoint}
    prompt_tokens: [256]
    output_tokens: [100]
    parallel: [2]
    min_requests: 6
    max_requests: 6"""))
    run = drive(points, config(reasoning_share=0.3), perf=P)
    for record in run.records:
        assert record.reasoning_tokens == 30 and record.reasoning_tokens_source == source
        first_answer = 31 if endpoint == "chat" else 33  # a completion's text spends two tokens on the tags
        assert record.first_answer_at == record.chunk_times[first_answer - 1] > record.first_token_at
        assert record.reasoning_chunks == first_answer - 1


# --- speculative decoding --------------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens, rate", [(1, 0.5), (3, 0.7), (5, 0.3), (4, 1.0), (2, 0.0)])
def test_the_conditional_acceptance_gives_the_configured_rate(tokens, rate):
    spec = Speculation(tokens=tokens, acceptance=rate)
    assert expected_accepted(spec.p, tokens) / tokens == pytest.approx(rate, abs=1e-9)
    assert spec.per_position() == pytest.approx([spec.p ** (i + 1) for i in range(tokens)])


def test_a_speculating_scheduler_counts_as_vllm_and_gains_one_plus_the_accepted_tokens_a_step():
    spec = Speculation(tokens=3, acceptance=0.6)
    sched = Scheduler(P, spec=spec, seed=1)
    seqs = [sched.add(Seq(64, 400)) for _ in range(48)]  # ~7,000 drafts: the rate's standard error is ~0.4 %
    now, steps = 0.0, 0
    while sched.has_work:
        step = sched.next_step(now)
        sched.finish_step(step)
        now, steps = step.end_s, steps + 1
    c = sched.spec_counters
    assert all(s.output_tokens == 400 for s in seqs)  # never past max_tokens
    assert c.draft_tokens == 3 * c.drafts and c.accepted_tokens / c.draft_tokens == pytest.approx(0.6, rel=0.02)
    assert [n / c.drafts for n in c.accepted_per_pos] == pytest.approx(spec.per_position(), abs=0.02)
    assert sched.generation_tokens_total == 48 * 400
    assert steps < 400 / (1 + 3 * 0.6) * 1.2  # ~2.8 tokens a step instead of 1


def test_speculation_speeds_decode_up_on_the_roofline_and_eagle_drafts_cost_time():
    perf = build_perf_model(model="Llama-3.1-8B", model_config=None, gpu="H100")
    batch = [SeqWork(1 + 4, 2000) for _ in range(8)]
    plain = perf.step_time_s([], [SeqWork(1, 2000) for _ in range(8)])
    verify = perf.step_time_s([], batch)
    assert plain <= verify < 1.2 * plain  # memory bound: 5 tokens a sequence cost little more than 1
    assert 0 < perf.draft_time_s(batch, 4) < verify  # a one-layer head, 4 times


# --- LoRA -------------------------------------------------------------------------------------------------------

def test_each_distinct_adapter_of_a_step_adds_its_weights_to_the_step():
    perf = build_perf_model(model="Llama-3.1-8B", model_config=None, gpu="A100-80GB", lora_rank=16)
    per_adapter = lora_params(perf.arch, 16) * 2
    base = perf.cost([], [SeqWork(1, 1000) for _ in range(8)])
    one = perf.cost([], [SeqWork(1, 1000, "a") for _ in range(8)])
    four = perf.cost([], [SeqWork(1, 1000, f"a{i % 4}") for i in range(8)])
    assert one.bytes - base.bytes == pytest.approx(per_adapter)
    assert four.bytes - base.bytes == pytest.approx(4 * per_adapter)
    assert base.total_s < one.total_s < four.total_s


def test_max_loras_passes_a_request_over_without_blocking_those_behind_it():
    sched = Scheduler(P, max_loras=1)
    a1, b, a2 = (sched.add(Seq(32, 4, adapter=x)) for x in ("a", "b", "a"))
    step = sched.next_step(0.0)
    assert step.prefill == [a1, a2] and list(sched.waiting) == [b]  # b waits for a's slot, a2 goes past it
    sched.finish_step(step)
    while sched.has_work:
        step = sched.next_step(step.end_s)
        sched.finish_step(step)
    assert b.scheduled_s is not None and b.scheduled_s > a2.scheduled_s


def test_records_name_the_adapter_and_the_server_counts_its_slots():
    points = expand(suite("""  - kind: closed
    prompt_tokens: [64]
    output_tokens: [16]
    parallel: [4]
    min_requests: 8
    max_requests: 8
    adapters: [x, y]
    adapter_counts: [0, 2]
    adapter_pick: per-user"""))
    run = drive(points, config(lora=LoraServing(adapters=("x", "y"), max_loras=2)), perf=P)
    named = {(r.scenario, r.adapter) for r in run.records}
    assert named == {("closed-in64-out16-p4-a0", None), ("closed-in64-out16-p4-a2", "x"),
                     ("closed-in64-out16-p4-a2", "y")}


# --- the card ---------------------------------------------------------------------------------------------------

CARD_SUITE = """  - kind: closed
    endpoint: chat
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [10]
    min_requests: 60
    max_requests: 60
  - kind: closed
    prompt_tokens: [512]
    output_tokens: [64]
    parallel: [8]
    min_requests: 32
    max_requests: 32
    adapters: [a, b, c, d]
    adapter_counts: [0, 1, 4]"""


def test_a_modelled_card_shows_the_configured_acceptance_and_reasoning(tmp_path):
    served = ServedModel(reasoning_share=0.25, speculation=Speculation(tokens=4, acceptance=0.65),
                         lora=LoraServing(adapters=("a", "b", "c", "d"), rank=32))
    simulate(suite(CARD_SUITE), SimConfig(model="Llama-3.1-8B", gpu="A100-80GB", served=served),
             options=DriveOptions(step_jitter=0.02), run_dir=tmp_path)
    card = render_run(tmp_path).read_text("utf-8")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reasoning"] is True
    assert summary["speculative"]["acceptance_rate"] == pytest.approx(0.65, rel=0.02)
    assert summary["speculative"]["mean_accepted_tokens"] == pytest.approx(4 * 0.65, rel=0.02)
    chat = summary["scenarios"][0]
    assert chat["reasoning_tokens_mean"] == 32 and chat["answer_tokens_mean"] == 96  # 25 % of 128, exactly
    assert chat["ttfa_s"]["p50"] > chat["ttft_s"]["p50"] and chat["reasoning_tokens_source"] == "usage"
    assert chat["speculative"]["acceptance_rate"] == pytest.approx(0.65, rel=0.05)
    sent = [s for s in summary["scenarios"] if s["scenario"].startswith("closed-in512")]
    assert [s["adapters_in_flight"] for s in sent] == [None, pytest.approx(1.0), pytest.approx(4.0, rel=0.05)]
    assert sent[0]["tpot_s"]["p50"] < sent[2]["tpot_s"]["p50"]  # four adapters' weights read every step
    for heading in ("## Reasoning", "## Speculative decoding", "## LoRA adapters", "| Time to first answer token"):
        assert heading in card
    assert f"**{pct(summary['speculative']['acceptance_rate'])}** (accepted draft tokens / draft tokens)" in card


def test_the_served_model_survives_run_json(tmp_path):
    served = ServedModel(reasoning_share=0.5, speculation=Speculation(tokens=2, acceptance=0.4, method="eagle"),
                         lora=LoraServing(adapters=("a",), rank=8, max_loras=1))
    run = simulate(suite("  - kind: ingest\n    prompt_tokens: [16, 64, 256]\n"),
                   SimConfig(model="Llama-3.1-8B", served=served), run_dir=tmp_path)
    described = run.info.sim.model_extra
    assert ServedModel.of_described(described) == served
    assert ServedModel.of_described({}) == ServedModel()


def test_a_modelled_run_pays_for_an_eagle_draft_head_and_not_for_ngram_lookups():
    points = expand(suite("""  - kind: closed
    prompt_tokens: [512]
    output_tokens: [64]
    parallel: [4]
    min_requests: 8
    max_requests: 8"""))

    def tpot(**served) -> float:
        config = SimConfig(model="Llama-3.1-8B", gpu="H100", served=ServedModel(**served))
        run = drive(points, config, options=DriveOptions(step_jitter=0.02))  # jittered steps, as a modelled build
        return sorted((r.end_at - r.first_token_at) / (r.output_tokens - 1) for r in run.records)[4]

    plain = tpot()
    ngram = tpot(speculation=Speculation(tokens=4, acceptance=0.7))
    eagle = tpot(speculation=Speculation(tokens=4, acceptance=0.7, method="eagle"))
    assert ngram < eagle < plain  # 3.8 tokens a step; the draft head's four passes cost some of that back
