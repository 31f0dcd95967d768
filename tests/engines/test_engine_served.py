"""What servers run in 2026, against real vLLM (CPU build), on one more server for the session
(``vllm_features_server``): the tiny model with two LoRA adapters made offline with peft and served with
``--enable-lora --lora-modules`` (the flags ``cardgen build --launch vllm --lora-module`` passes), ngram
speculative decoding (3 draft tokens), and the ``granite`` reasoning parser.

- LoRA: each request names its adapter as its model; vLLM runs it (its own ``vllm:lora_requests_info`` says so);
  the card gives each adapter's figures and the distinct adapters in flight.
- Speculation: the card's acceptance is vLLM's own counters' increase over the run, exactly (the test reads
  ``/metrics`` before and after); the client's own records agree: a step's accepted drafts arrive in the chunk of
  its bonus token, so the tokens after each request's first, less its chunks after the first, are the accepted
  drafts vLLM counted (a little fewer: a request's last step is cut at ``max_tokens``).
- Workload: the acceptance of ShareGPT prompts against random ones, one run each (printed; which is higher
  depends on the model's text: the tiny random-weight model repeats itself whatever it is asked).
- Reasoning parser: its chunks carry ``"reasoning": null`` beside the content, and usage says 0 reasoning tokens:
  recorded as a model that did not reason.
"""

from __future__ import annotations

import json

import pytest
from test_engine_e2e import build_against, cardgen, read_jsonl

from cardgen.engines import counter, labelled_counter, metric_names

pytestmark = pytest.mark.engine

LORA_SPEC_SUITE = """name: lora-spec
scenarios:
  - kind: closed
    endpoint: chat
    prompt_tokens: [128]
    output_tokens: [64]
    parallel: [4]
    min_requests: 8
    max_requests: 8
    adapters: [tiny-a, tiny-b]
    adapter_counts: [0, 2]
"""
WORKLOADS = {
    "sharegpt": "name: spec-sharegpt\nscenarios:\n  - {kind: open, dataset: sharegpt, rates: [inf], num_requests: 8}\n",
    "random": ("name: spec-random\nscenarios:\n  - {kind: open, prompt_tokens: 256, output_tokens: 64, rates: [inf], "
               "num_requests: 8}\n"),
}


def spec_delta(before: str, after: str) -> dict[str, float]:
    names = metric_names("vllm")
    out = {role: counter(after, names[role]) - counter(before, names[role])
           for role in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")}
    start = labelled_counter(before, names["spec_accepted_per_pos"], "position")
    end = labelled_counter(after, names["spec_accepted_per_pos"], "position")
    out["per_pos"] = [end[p] - start.get(p, 0.0) for p in sorted(end)]
    return out


@pytest.fixture(scope="module")
def lora_spec_run(vllm_features_server, tmp_path_factory):
    return build_against(vllm_features_server, tmp_path_factory, "lora-spec", LORA_SPEC_SUITE)


def test_each_request_runs_its_adapter_and_the_card_gives_each_adapters_figures(lora_spec_run):
    out, _, _ = lora_spec_run
    records = read_jsonl(out / "requests.jsonl")
    assert records and all(r["error"] is None for r in records)
    assert {(r["scenario"], r["adapter"]) for r in records} == {
        ("closed-in128-out64-p4-a0", None), ("closed-in128-out64-p4-a2", "tiny-a"),
        ("closed-in128-out64-p4-a2", "tiny-b")}
    running = {label for line in (out / "server_metrics.jsonl").read_text().splitlines()
               for s in json.loads(line).get("samples", {}).get("vllm:lora_requests_info", [])
               for label in s["labels"].get("running_lora_adapters", "").split(",") if label}
    assert running <= {"tiny-a", "tiny-b"} and running  # vLLM ran the adapters it was asked for
    summary = json.loads((out / "summary.json").read_text())
    base, both = summary["scenarios"]
    assert base["per_adapter"] == [] and [a["adapter"] for a in both["per_adapter"]] == ["tiny-a", "tiny-b"]
    assert 1.0 <= both["adapters_in_flight"] <= 2.0
    card = (out / "README.md").read_text()
    assert "## LoRA adapters" in card and "| closed-in128-out64-p4-a2 | tiny-b |" in card


def test_the_cards_acceptance_is_vllms_own_counters_and_the_chunks_agree(lora_spec_run):
    out, before, after = lora_spec_run
    truth = spec_delta(before, after)
    assert truth["spec_drafts"] > 0
    spec = json.loads((out / "summary.json").read_text())["speculative"]
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (
        truth["spec_drafts"], truth["spec_draft_tokens"], truth["spec_accepted_tokens"])
    assert spec["acceptance_rate"] == pytest.approx(truth["spec_accepted_tokens"] / truth["spec_draft_tokens"])
    assert spec["per_position"] == pytest.approx([n / truth["spec_drafts"] for n in truth["per_pos"]])
    records = read_jsonl(out / "requests.jsonl")
    # one chunk a step (with or without drafts: ngram proposes none when the text has no match), its accepted
    # drafts in it: the extra tokens are the accepted drafts, less what max_tokens cut from each last step
    extra = sum(r["output_tokens"] - len(r["chunk_times"]) for r in records)
    assert 0.9 * spec["accepted_tokens"] <= extra <= spec["accepted_tokens"]
    assert "## Speculative decoding" in (out / "README.md").read_text()


def test_a_parsers_null_reasoning_and_zero_count_is_a_model_that_did_not_reason(lora_spec_run):
    out, _, _ = lora_spec_run
    records = read_jsonl(out / "requests.jsonl")
    assert all(r["reasoning_tokens"] == 0 and r["reasoning_tokens_source"] == "usage" for r in records)
    assert all(r["reasoning_chunks"] == 0 and r["first_answer_at"] == r["first_token_at"] for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reasoning"] is False and "## Reasoning" not in (out / "README.md").read_text()


def test_acceptance_depends_on_the_workload(vllm_features_server, tmp_path_factory):
    rates, runs = {}, {}
    for name, suite in WORKLOADS.items():
        out, before, after = build_against(vllm_features_server, tmp_path_factory, f"spec-{name}", suite)
        truth = spec_delta(before, after)
        spec = json.loads((out / "summary.json").read_text())["speculative"]
        assert spec["accepted_tokens"] == truth["spec_accepted_tokens"] and truth["spec_drafts"] > 0
        point = json.loads((out / "summary.json").read_text())["scenarios"][0]["speculative"]
        assert point is not None and point["acceptance_rate"] == pytest.approx(spec["acceptance_rate"])
        rates[name] = (spec["acceptance_rate"], spec["mean_acceptance_length"])
        runs[name] = out
    print(f"\nngram acceptance on the tiny model: ShareGPT {rates['sharegpt'][0]:.3f} "
          f"(length {rates['sharegpt'][1]:.2f}), random prompts {rates['random'][0]:.3f} "
          f"(length {rates['random'][1]:.2f})")
    diff = cardgen("diff", str(runs["random"]), str(runs["sharegpt"]), "--json", "--only-shared")
    assert diff.returncode == 0, diff.stderr
    figure = next(h for h in json.loads(diff.stdout)["headlines"] if h["name"] == "acceptance_rate")
    assert (figure["a"], figure["b"]) == pytest.approx((rates["random"][0], rates["sharegpt"][0]))


def test_reasoning_a_server_did_not_count_is_counted_by_its_tokenize(vllm_features_server, tiny_model):
    # what the load engine does after a stream whose reasoning usage did not count (a <think> span the chat
    # template opened, a parser that counts nothing): the text through vLLM's /tokenize, no special token added
    from transformers import AutoTokenizer

    from cardgen.load.reasoning import tokenize_reasoning
    from cardgen.load.sse import StreamResult
    from cardgen.load.transport import Connection, Target

    text = "Let me think: six times seven is forty-two, so the answer is 42."
    expected = len(AutoTokenizer.from_pretrained(str(tiny_model)).encode(text, add_special_tokens=False))
    conn = Connection(Target.from_url(vllm_features_server.url, {}))
    try:
        for model in ("tiny-llama", "tiny-a"):  # an adapter's requests name the adapter: same tokenizer
            parsed = StreamResult(reasoning_parts=[text], reasoning_chunks=5)
            assert tokenize_reasoning(conn, parsed, model=model, timeout_s=30) == (expected, "tokenize")
    finally:
        conn.close()
