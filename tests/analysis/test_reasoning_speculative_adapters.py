"""The figures of reasoning models, speculative decoding and LoRA adapters, from hand-made records and scrapes
whose answers are known."""

from __future__ import annotations

import pytest

from cardgen.analysis.adapters import distinct_in_flight
from cardgen.analysis.reasoning import reasoning_figures, reasons
from cardgen.analysis.requests import request_frame
from cardgen.analysis.speculative import speculative_points, speculative_run
from cardgen.schemas import MetricSample, RequestRecord
from cardgen.schemas.summary import ScenarioSummary


def record(**fields) -> RequestRecord:
    base = {"scenario": "p", "kind": "closed", "prompt_tokens_target": 10, "output_tokens_target": 100,
            "sent_at": 0.0, "first_token_at": 1.0, "end_at": 5.0, "output_tokens": 100, "reasoning_chunks": 0}
    return RequestRecord(**{**base, **fields})


def test_reasoning_columns_and_figures():
    frame = request_frame([
        record(first_answer_at=3.0, reasoning_tokens=40, reasoning_chunks=40, reasoning_tokens_source="usage"),
        record(first_answer_at=None, reasoning_tokens=100, reasoning_chunks=100, reasoning_tokens_source="tokenize"),
        record(first_answer_at=1.0, reasoning_tokens=0, reasoning_tokens_source="usage")])
    thought, never, plain = frame.to_dict("records")
    assert thought["ttfa_s"] == 3.0 and thought["answer_tokens"] == 60
    assert thought["reasoning_tok_s"] == 40 / (3.0 - 1.0)  # tokens from the first one to the answer's first
    assert thought["answer_tok_s"] == (60 - 1) / (5.0 - 3.0)
    assert never["ttfa_s"] != never["ttfa_s"]  # NaN: no answer
    assert never["reasoning_tok_s"] == (100 - 1) / (5.0 - 1.0)
    assert plain["ttfa_s"] == 1.0 and plain["reasoning_tok_s"] != plain["reasoning_tok_s"]
    summary = ScenarioSummary(scenario="p", kind="closed", prompt_tokens=10, output_tokens=100)
    reasoning_figures(summary, frame)
    assert summary.reasoning_tokens_mean == pytest.approx(140 / 3) and summary.answer_tokens_mean == pytest.approx(
        (60 + 0 + 100) / 3)
    assert summary.unanswered == 1 and summary.ttfa_s.n == 2 and summary.reasoning_tokens_source == "tokenize and usage"
    assert reasons(frame) and not reasons(request_frame([record(first_answer_at=1.0)]))


def test_an_old_record_says_nothing_of_reasoning():
    old = RequestRecord.model_validate({"scenario": "p", "kind": "closed", "prompt_tokens_target": 1,
                                        "output_tokens_target": 4, "sent_at": 0.0, "first_token_at": 1.0,
                                        "end_at": 2.0, "output_tokens": 4})
    row = request_frame([old]).iloc[0]
    assert old.reasoning_chunks is None and row["ttfa_s"] != row["ttfa_s"] and row["adapter"] == ""


def scrape(t: float, drafts: float, tokens: float, accepted: float, per_pos=(), **extra) -> MetricSample:
    samples = {"vllm:spec_decode_num_drafts_total": [{"labels": {}, "value": drafts}],
               "vllm:spec_decode_num_draft_tokens_total": [{"labels": {}, "value": tokens}],
               "vllm:spec_decode_num_accepted_tokens_total": [{"labels": {}, "value": accepted}],
               "vllm:spec_decode_num_accepted_tokens_per_pos_total": [
                   {"labels": {"position": str(i)}, "value": v} for i, v in enumerate(per_pos)]}
    samples.update({k: [{"labels": {}, "value": v}] for k, v in extra.items()})
    return MetricSample(t=t, t_end=t + 0.01, samples=samples)


def test_vllm_counters_give_acceptance_over_the_run_and_each_point_the_scrapes_isolate():
    scrapes = [scrape(0.0, 0, 0, 0, (0, 0)), scrape(1.0, 100, 200, 150, (90, 60)), scrape(2.0, 100, 200, 150, (90, 60)),
               scrape(3.0, 300, 600, 250, (170, 80)), scrape(3.4, 310, 620, 250, (170, 80))]
    run = speculative_run(scrapes, engine="vllm")
    assert run.acceptance_rate == pytest.approx(250 / 620) and run.mean_accepted_tokens == pytest.approx(250 / 310)
    assert run.mean_acceptance_length == pytest.approx(1 + 250 / 310)
    assert run.per_position == pytest.approx([170 / 310, 80 / 310]) and run.method == "counters"
    points = [ScenarioSummary(scenario=n, kind="closed", prompt_tokens=1, output_tokens=1, started_unix=a,
                              ended_unix=b) for n, a, b in (("a", 0.1, 0.9), ("b", 1.1, 2.5), ("c", 2.6, 3.2))]
    speculative_points(scrapes, points, engine="vllm")
    a, b, c = (p.speculative for p in points)
    assert a.acceptance_rate == pytest.approx(0.75) and a.per_position == pytest.approx([0.9, 0.6])
    # no scrape between b's end and c's start: each has the scrapes inside it (b: 2.0 alone, c: 3.0 alone: none)
    assert b is None and c is None
    inside = [*scrapes[:3], scrape(2.3, 150, 300, 170, (100, 70)), *scrapes[3:]]
    speculative_points(inside, points, engine="vllm")
    b, c = points[1].speculative, points[2].speculative
    assert (b.start_unix, b.end_unix, b.drafts, b.accepted_tokens) == (2.0, 2.3, 50, 20) and c is None
    points[2].started_unix = 3.05  # now the scrape at 3.0 falls between them
    speculative_points(scrapes, points, engine="vllm")
    b, c = points[1].speculative, points[2].speculative
    assert b.acceptance_rate == pytest.approx(100 / 400) and b.mean_accepted_tokens == pytest.approx(0.5)
    assert c.acceptance_rate == 0.0 and c.drafts == 10


def test_sglang_gauges_give_acceptance_as_the_mean_over_scrapes():
    scrapes = [MetricSample(t=float(i), samples={"sglang:spec_accept_length": [{"labels": {}, "value": v}],
                                                  "sglang:spec_accept_rate": [{"labels": {}, "value": r}]})
               for i, (v, r) in enumerate([(0.0, 0.0), (3.0, 0.5), (3.4, 0.6)])]
    spec = speculative_run(scrapes, engine="sglang")
    assert spec.method == "gauges" and spec.mean_acceptance_length == pytest.approx(3.2)
    assert spec.mean_accepted_tokens == pytest.approx(2.2) and spec.acceptance_rate == pytest.approx(0.55)
    assert speculative_run(scrapes, engine="tgi") is None


def test_distinct_adapters_in_flight_is_time_weighted():
    frame = request_frame([record(adapter="a", sent_at=0.0, end_at=4.0), record(adapter="b", sent_at=2.0, end_at=4.0),
                           record(adapter=None, sent_at=4.0, end_at=6.0)])
    # 0-2 s: {a}; 2-4 s: {a, b}; 4-6 s: the base model only
    assert distinct_in_flight(frame) == pytest.approx((2 * 1 + 2 * 2 + 2 * 0) / 6)
