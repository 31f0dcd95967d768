"""Dataset-drawn requests: loading (ShareGPT, a local file, JSONL), vLLM's filter, seeded sampling, the suite
entry and its points, and the virtual-time driver sending them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cardgen import datasets
from cardgen.datasets import keep, pairs, resolve, sample
from cardgen.errors import UsageError
from cardgen.points import expand
from cardgen.sim import tokenizer
from cardgen.suite import load_suite, parse_suite


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


def sharegpt_file(path: Path, lengths: list[tuple[int, int]], *, torn: bool = False) -> Path:
    """A ShareGPT-format file: one conversation per (prompt words, completion words); a one-turn conversation
    at the front; optionally cut short in the middle of a last conversation."""
    convs = [{"id": "one-turn", "conversations": [{"from": "human", "value": words(50)}]}]
    for i, (p, o) in enumerate(lengths):
        convs.append({"id": f"c{i}", "conversations": [
            {"from": "human", "value": f"q{i} " + words(p - 1)}, {"from": "gpt", "value": words(o)},
            {"from": "human", "value": "and then?"}]})
    text = json.dumps(convs, indent=1)
    if torn:
        tail = json.dumps({"id": "torn", "conversations": [{"from": "human", "value": words(30)}]})
        text = text[:-2] + ",\n" + tail[: len(tail) // 2]
    path.write_text(text, "utf-8")
    return path


def sample_words(source: str, n: int, seed: int = 0) -> list[datasets.Sampled]:
    return sample(source, num_requests=n, seed=seed, count_prompt=tokenizer.count_text,
                  count_output=tokenizer.count_text)


def test_vllms_filter_drops_too_short_and_too_long_pairs():
    assert keep(4, 4) and keep(1024, 1024)
    assert not keep(3, 100) and not keep(100, 3)  # too short
    assert not keep(1025, 10) and not keep(1000, 1049)  # prompt > 1024, prompt + output > 2048
    assert not keep(100, 100, max_total=199) and keep(100, 99, max_total=199)  # the server's context


def test_a_torn_sharegpt_file_keeps_every_complete_conversation(tmp_path):
    path = sharegpt_file(tmp_path / "d.json", [(10, 20), (30, 40)], torn=True)
    got = pairs(str(path))
    assert [(p.prompt.split()[0], len((p.completion or "").split())) for p in got] == [("q0", 20), ("q1", 40)]


def test_sampling_is_seeded_filtered_and_takes_the_completion_length(tmp_path):
    lengths = [(2, 50), (50, 2), (2000, 10), (900, 1200)] + [(10 + i, 20 + i) for i in range(30)]
    path = str(sharegpt_file(tmp_path / "d.json", lengths))
    a, b, c = sample_words(path, 20, seed=1), sample_words(path, 20, seed=1), sample_words(path, 20, seed=2)
    assert a == b and [s.source_index for s in a] != [s.source_index for s in c]
    assert all(keep(s.prompt_tokens, s.output_tokens) for s in a)
    for s in a:  # the output length is the reference completion's token count
        i = int(s.prompt.split()[0][1:])
        assert (s.prompt_tokens, s.output_tokens) == lengths[i]
    with pytest.raises(UsageError, match="only 30 requests that pass the filter; 31 were asked for"):
        sample_words(path, 31)


def test_jsonl_requests_give_their_own_output_length(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": words(5 + i), "output_tokens": 7 + i}) for i in range(5)) + "\n")
    got = sample_words(str(path), 5, seed=3)
    assert sorted((s.prompt_tokens, s.output_tokens) for s in got) == [(5 + i, 7 + i) for i in range(5)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x y z w"}\n')
    with pytest.raises(UsageError, match="line 1 needs a string 'prompt' and an integer 'output_tokens'"):
        pairs(str(bad))


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    import importlib.resources as res

    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(res, "files", missing)
    pairs.cache_clear()
    with pytest.raises(UsageError, match=r"pip install 'cardgen\[sharegpt\]'") as err:
        pairs("sharegpt")
    assert "\n" not in err.value.message
    pairs.cache_clear()


def test_the_sharegpt_extra_samples_200_requests_reproducibly():
    got = sample_words("sharegpt", 200, seed=0)
    again = sample_words("sharegpt", 200, seed=0)
    assert len(got) == 200 and got == again
    assert len(pairs("sharegpt")) > 17_000  # every complete conversation of the shipped file (cut short)
    assert all(keep(s.prompt_tokens, s.output_tokens) for s in got)
    assert len({s.output_tokens for s in got}) > 50  # each conversation's own length


def test_the_suite_entry_takes_a_dataset_or_lengths_not_both(tmp_path):
    text = "name: x\nscenarios:\n  - kind: open\n    rates: [1, inf]\n    num_requests: 5\n"
    suite = parse_suite(text + "    dataset: d.jsonl\n", source="x")
    points = expand(suite)
    assert [p.name for p in points] == ["open-d-r1", "open-d-rinf"]
    assert points[0].dataset_key() == points[1].dataset_key() and points[0].prompt_lengths() == []
    with pytest.raises(UsageError, match="not both"):
        parse_suite(text + "    dataset: d.jsonl\n    prompt_tokens: 5\n    output_tokens: 5\n", source="x")
    with pytest.raises(UsageError, match="or a 'dataset'"):
        parse_suite(text, source="x")
    with pytest.raises(UsageError, match="dataset 'd.txt': use 'sharegpt'"):
        parse_suite(text + "    dataset: d.txt\n", source="x")


def test_the_builtin_sharegpt_suite_is_vllms_nightly_serving_tests():
    points = expand(load_suite("sharegpt"))
    assert [p.rate_rps for p in points] == [1, 4, 16, math.inf]
    assert {p.params.num_requests for p in points} == {200} and {p.dataset for p in points} == {"sharegpt"}


def test_resolve_gives_every_rate_the_same_requests_with_a_unique_id_slot(tmp_path):
    path = sharegpt_file(tmp_path / "d.json", [(10 + i, 20 + i) for i in range(12)])
    text = f"name: x\nscenarios:\n  - kind: open\n    rates: [2, 8]\n    num_requests: 6\n    dataset: {path}\n"
    points = expand(parse_suite(text, source="x"))
    points, texts = resolve(points, counter=lambda endpoint: tokenizer.count_text, max_model_len=None)
    (key, prompts), = texts.items()
    assert points[0].items == points[1].items and len(prompts) == 6
    from cardgen.prompts import ID_SLOT

    for (p, _o), prompt in zip(points[0].items, prompts, strict=True):
        assert prompt.startswith(f"Request {ID_SLOT}. ") and p == tokenizer.count_text(prompt.replace(ID_SLOT, "x"))


def test_the_virtual_driver_sends_the_sampled_requests(tmp_path):
    from cardgen.sim.config import SimConfig, build_perf
    from cardgen.sim.drive import drive, sample_datasets

    path = sharegpt_file(tmp_path / "d.json", [(10 + i, 20 + i) for i in range(12)])
    text = f"name: x\nscenarios:\n  - kind: open\n    rates: [4, inf]\n    num_requests: 8\n    dataset: {path}\n"
    config = SimConfig(model="CodeLlama-7b", gpu="A100-80GB")
    points = sample_datasets(expand(parse_suite(text, source="x")), config, build_perf(config))
    run = drive(points, config)
    by_point: dict[str, list] = {}
    for r in run.records:
        by_point.setdefault(r.scenario, []).append(r)
    assert set(by_point) == {p.name for p in points}
    for point in points:
        recs = sorted(by_point[point.name], key=lambda r: r.item)
        assert [r.item for r in recs] == list(range(8))
        assert [(r.prompt_tokens, r.output_tokens) for r in recs] == list(point.items)
        assert all(r.output_tokens_target == r.output_tokens for r in recs)
