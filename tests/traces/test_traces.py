"""Trace formats (cardgen.traces): each recognised from its columns, an unknown one a one-line error; the sample
traces cardgen ships are its own generator's output; a suite replays a trace without rates."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from cardgen.datasets import resolve
from cardgen.errors import UsageError
from cardgen.kinds.entry import TRACE_SAMPLES
from cardgen.points import expand
from cardgen.suite import parse_suite
from cardgen.traces import MOONCAKE_BLOCK_TOKENS, is_trace, read_trace, samples


def test_every_sample_is_recognised_from_its_columns():
    moon, azure, burst = (read_trace(n) for n in ("mooncake-sample", "azure-sample", "burstgpt-sample"))
    assert (moon.format, azure.format, burst.format) == ("mooncake", "azure", "burstgpt")
    assert len(moon.requests) == len(azure.requests) == samples.REQUESTS
    assert len(burst.requests) + burst.left_out == samples.REQUESTS and burst.left_out > 0  # no answer: left out
    assert moon.block_tokens == MOONCAKE_BLOCK_TOKENS and azure.block_tokens == 0
    for a, b in zip(moon.requests, azure.requests, strict=True):  # the same traffic in both formats
        assert a.offset_s == pytest.approx(b.offset_s, abs=1e-6)
        assert (a.input_tokens, a.output_tokens) == (b.input_tokens, b.output_tokens)
    assert moon.requests[0].offset_s == 0 and all(
        x.offset_s <= y.offset_s for x, y in zip(moon.requests, moon.requests[1:], strict=False))
    shared = [r for r in moon.requests if r.hash_ids and r.hash_ids[0] < 100_000]
    assert len(shared) == len(moon.requests)  # every request starts with one of the system prompts' blocks


def test_the_shipped_samples_are_the_generators_own_output():
    made = samples.texts()
    for name, file in TRACE_SAMPLES.items():
        shipped = resources.files("cardgen.traces").joinpath("data", file).read_text("utf-8")
        assert shipped == made[file], f"{file} differs: run python -m cardgen.traces.samples"
        assert is_trace(name)


def test_the_sample_is_bursty():
    arrivals = [r.offset_s for r in read_trace("azure-sample").requests]
    per_second = [sum(1 for t in arrivals if k <= t < k + 1) for k in range(int(arrivals[-1]))]
    assert max(per_second) >= 4 * (len(arrivals) / arrivals[-1])  # bursts well above the mean rate


@pytest.mark.parametrize(("name", "text", "said"), [
    ("x.csv", "time,prompt,answer\n1,2,3\n", "not a trace cardgen knows (columns answer, prompt, time)"),
    ("x.jsonl", '{"timestamp": 1, "input_length": 5}\n', "lacks output_length"),
    # a line that is no object (this raised TypeError while the error was being worded)
    ("x.jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 2}\n5\n',
     "line 2 lacks input_length, output_length, timestamp"),
    ("x.jsonl", '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": "ab"}\n',
     "hash_ids must be a list of integers"),
    ("x.csv", "Timestamp,Request tokens,Response tokens\n0.5,many,3\n", "'many' is not a number of tokens"),
    ("x.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,3\n", "is not a date and time"),
])
def test_a_bad_trace_is_a_one_line_error(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text)
    read_trace.cache_clear()
    with pytest.raises(UsageError) as err:
        read_trace(str(path))
    assert said in err.value.message and "\n" not in err.value.message
    if "columns" in said:
        assert "Mooncake JSONL" in err.value.message and "BurstGPT CSV" in err.value.message


def test_a_mooncake_file_is_a_trace_and_a_prompt_file_is_not(tmp_path):
    moon, prompts = tmp_path / "m.jsonl", tmp_path / "p.jsonl"
    moon.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}) + "\n")
    prompts.write_text(json.dumps({"prompt": "hi", "output_tokens": 5}) + "\n")
    assert is_trace(str(moon)) and not is_trace(str(prompts))


def _points(entry: str):
    return expand(parse_suite(f"name: t\nscenarios:\n  - {entry}\n", source="t"))


def test_a_trace_entry_without_rates_is_one_replayed_point_named_after_the_entry():
    (point,) = _points("{kind: open, name: prod, dataset: azure-sample, speedup: 4, max_requests: 50}")
    assert (point.name, point.group, point.replay, point.params.speedup, point.params.num_requests) == (
        "prod-azure-sample-x4", "prod", True, 4.0, 50)


@pytest.mark.parametrize(("entry", "said"), [
    ("{kind: open, prompt_tokens: 8, output_tokens: 8}", "give 'rates', or a trace"),
    ("{kind: open, dataset: azure-sample, rates: [2], speedup: 2}", "drop 'rates'"),
    ("{kind: open, dataset: trace.parquet}", "a trace (Mooncake .jsonl, Azure or BurstGPT .csv"),
])
def test_bad_replay_entries_are_one_line_errors(entry, said):
    with pytest.raises(UsageError) as err:
        _points(entry)
    assert said in err.value.message


def test_a_dataset_that_is_not_a_trace_cannot_be_replayed_and_a_trace_cannot_take_rates(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello there", "output_tokens": 5}) + "\n")
    with pytest.raises(UsageError, match="is not a trace"):
        resolve(_points(f"{{kind: open, dataset: {prompts}}}"), counter=lambda _: lambda t: len(t.split()))
    with pytest.raises(UsageError, match="is a trace: it is replayed at its own times"):
        resolve(_points("{kind: open, dataset: azure-sample, rates: [2]}"), counter=lambda _: lambda t: len(t.split()))
