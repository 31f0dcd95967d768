"""The workloads of issue 11 as the virtual-time driver sends them (the scenario programs are the load engine's
too): dataset requests, shared prefixes, and chat turns whose history carries the model's own replies; and points
beyond the served context left out, not failed. In virtual time, in process (they ran against the real-time
server through the load engine, tests/load/test_load_workloads.py and test_load_e2e.py, before)."""

from __future__ import annotations

import json
from pathlib import Path

from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import RunData
from cardgen.card.render import render_card
from cardgen.sim.config import SimConfig
from cardgen.sim.perf import FixedPerf
from cardgen.suite import parse_suite

# the load tests' fixed server (tests/load/loadkit.py)
PERF = FixedPerf(prefill_tok_s=200_000.0, step_overhead_s=0.010, per_seq_s=0.0002, kv_capacity_tokens=65536,
                 block_size=16, max_num_seqs=256, max_num_batched_tokens=8192)
CONFIG = SimConfig(model="test-model", perf="fixed")


def test_dataset_prefix_and_chat_requests_reach_the_server_as_planned(tmp_path: Path) -> None:
    data = tmp_path / "reqs.jsonl"
    data.write_text("".join(json.dumps({"prompt": " ".join(["w"] * (8 + i)), "output_tokens": 5 + i}) + "\n"
                            for i in range(10)))
    suite = parse_suite(f"""name: t
scenarios:
- {{kind: open, name: ds, dataset: {data}, num_requests: 6, rates: [50, inf], seed: 1}}
- {{kind: prefix, prefixes: 3, prefix_tokens: 256, suffix_tokens: 16, output_tokens: 4, warm_rounds: 1}}
- {{kind: chat, users: 2, turns: 3, first_tokens: 64, message_tokens: 16, output_tokens: 8, think_time_s: 0.1}}
""", source="test suite")
    run = simulate(suite, CONFIG, perf=PERF)
    records = run.drive.records
    assert all(r.error is None for r in records)
    ds = [r for r in records if r.group == "ds"]
    assert len(ds) == 12 and {r.item for r in ds} == set(range(6))
    for r in ds:  # the dataset's own output length, the prompt with its id counted exactly
        assert r.output_tokens == r.output_tokens_target and r.prompt_tokens == r.prompt_tokens_target
    by_point: dict[str, set] = {}
    for r in ds:
        by_point.setdefault(r.scenario, set()).add((r.item, r.prompt_tokens, r.output_tokens))
    assert len({frozenset(v) for v in by_point.values()}) == 1  # every rate sends the same requests
    prefix = [r for r in records if r.kind == "prefix"]
    assert [(r.phase, r.prefix) for r in sorted(prefix, key=lambda r: r.sent_at)] == [
        ("cold", 0), ("cold", 1), ("cold", 2), ("warm", 0), ("warm", 1), ("warm", 2)]
    chat = [r for r in records if r.scenario.startswith("chat-") and not r.scenario.endswith("-nocache")]
    for conversation in (0, 1):
        turns = sorted((r for r in chat if r.conversation == conversation), key=lambda r: r.turn)
        assert [r.turn for r in turns] == [1, 2, 3] and turns[0].prompt_tokens == 64
        # each turn = the last prompt + the reply the server generated (8 tokens and its message overhead, 4) +
        # the new message (16 as a one-message conversation, less the reply header, 3): the history is whole
        assert [b.prompt_tokens - a.prompt_tokens for a, b in zip(turns, turns[1:], strict=False)] == [25, 25]
    hits = run.drive.scrapes[-1].value("vllm:prefix_cache_hits_total")
    assert hits >= 3 * 256 - 3 * 16  # the warm pass was served from the cache
    card = render_card(analyse(RunData(info=run.info, requests=records, metrics=run.drive.scrapes)),
                       date="2026-11-22")
    assert "## Prefix cache" in card and "## Multi-turn chat" in card and "ds_qps_50" in card.replace("\\_", "_")


def test_points_beyond_the_servers_context_are_listed_as_not_run_not_failed() -> None:
    suite = parse_suite("name: t\nscenarios:\n- {kind: closed, prompt_tokens: [64, 1024], output_tokens: 8, "
                        "parallel: 2, min_requests: 4}\n", source="test suite")
    run = simulate(suite, SimConfig(model="test-model", perf="fixed", max_model_len=512), perf=PERF)
    records = run.drive.records
    assert {r.scenario for r in records} == {"closed-in64-out8-p2"} and all(r.error is None for r in records)
    # as a measured run lists them: not run, with why, and no request sent that must fail
    (ran, unfit) = run.info.points
    assert ran.name == "closed-in64-out8-p2" and ran.stop != "skipped"
    assert unfit.name == "closed-in1024-out8-p2" and unfit.stop == "skipped"
    assert unfit.detail == "not run: 1024 prompt + 8 output tokens exceed the 512 tokens the server takes per request"
    assert not any("closed-in1024-out8-p2" in w for w in run.info.warnings)
