"""The real load engine (a `cardgen build` subprocess) sending the workloads of issue 11 to the virtual server:
dataset requests, shared prefixes, and chat turns whose history carries the model's own replies."""

from __future__ import annotations

import json

from loadkit import build, read_records, sim_server


def test_dataset_prefix_and_chat_requests_reach_the_server_as_planned(tmp_path, write_suite):
    data = tmp_path / "reqs.jsonl"
    data.write_text("".join(json.dumps({"prompt": " ".join(["w"] * (8 + i)), "output_tokens": 5 + i}) + "\n"
                            for i in range(10)))
    suite = write_suite(f"""name: t
scenarios:
- {{kind: open, name: ds, dataset: {data}, num_requests: 6, rates: [50, inf], seed: 1}}
- {{kind: prefix, prefixes: 3, prefix_tokens: 256, suffix_tokens: 16, output_tokens: 4, warm_rounds: 1}}
- {{kind: chat, users: 2, turns: 3, first_tokens: 64, message_tokens: 16, output_tokens: 8, think_time_s: 0.1}}
""")
    with sim_server(tmp_path) as (sim, _stamps):
        proc = build("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    records = read_records(tmp_path / "run")
    assert all(r["error"] is None for r in records)
    ds = [r for r in records if r["group"] == "ds"]
    assert len(ds) == 12 and {r["item"] for r in ds} == set(range(6))
    for r in ds:  # the dataset's own output length, the prompt with its id counted exactly
        assert r["output_tokens"] == r["output_tokens_target"] and r["prompt_tokens"] == r["prompt_tokens_target"]
    by_point: dict[str, set] = {}
    for r in ds:
        by_point.setdefault(r["scenario"], set()).add((r["item"], r["prompt_tokens"], r["output_tokens"]))
    assert len({frozenset(v) for v in by_point.values()}) == 1  # every rate sends the same requests
    prefix = [r for r in records if r["kind"] == "prefix"]
    assert [(r["phase"], r["prefix"]) for r in sorted(prefix, key=lambda r: r["sent_at"])] == [
        ("cold", 0), ("cold", 1), ("cold", 2), ("warm", 0), ("warm", 1), ("warm", 2)]
    chat = [r for r in records if r["scenario"].startswith("chat-") and not r["scenario"].endswith("-nocache")]
    for conversation in (0, 1):
        turns = sorted((r for r in chat if r["conversation"] == conversation), key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [1, 2, 3] and turns[0]["prompt_tokens"] == 64
        # each turn = the last prompt + the reply the server generated (8 tokens and its message overhead, 4) +
        # the new message (16 as a one-message conversation, less the reply header, 3): the history is whole
        assert [b["prompt_tokens"] - a["prompt_tokens"] for a, b in zip(turns, turns[1:], strict=False)] == [25, 25]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "server_metrics.jsonl").read_text().splitlines()]
    hits = metrics[-1]["samples"]["vllm:prefix_cache_hits_total"][0]["value"]
    assert hits >= 3 * 256 - 3 * 16  # the warm pass was served from the cache
    from cardgen.analysis.analyse import analyse
    from cardgen.analysis.rundata import load_run
    from cardgen.card.render import render_card

    card = render_card(analyse(load_run(tmp_path / "run")), date="2026-11-22")
    assert "## Prefix cache" in card and "## Multi-turn chat" in card and "ds_qps_50" in card.replace("\\_", "_")
