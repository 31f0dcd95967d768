"""cardgen against the real llama.cpp ``llama-server`` (a CPU build of the source the ``llama-cpp-python`` sdist
vendors, ``build_llamacpp.sh``) serving a tiny random-weight GGUF: through ``--url`` with a cache per slot and with
one unified cache, and through ``--launch llamacpp``.

Each run checks what the issue "llama.cpp for real" asks: every prompt's token count is the server's own
``usage.prompt_tokens``, the KV capacity is what the server allocated (its log and ``/props``), no request was sent
that could not fit a slot, and every figure that could not be had is named on the card.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import requests
from clirun import cardgen

# one at a time, with no other test beside them: what the load does depends on the server's speed (a point cut
# off by its time bound, the saturation probe's waves), and on two shared cores it did otherwise
pytestmark = pytest.mark.engine

SLOTS, CTX = 4, 8192  # -np 4 -c 8192: four slots of 2,048 tokens each
# what the tests of the cache's layout and of the chosen slots need: every prompt length of the sweep, a point too
# long for a slot, a pair at 4 parallel
SHORT_SUITE = """\
name: llamacpp-short
endpoint: completions
timeout_s: 120
scenarios:
  - kind: ingest
    name: ingestion
    min_prompt_tokens: 16
    max_prompt_tokens: 3000
    points: 6
    output_tokens: 1
  - kind: closed
    name: too-long
    prompt_tokens: 2100
    output_tokens: 16
    parallel: [1]
    min_requests: 2
  - kind: closed
    name: pair
    prompt_tokens: 256
    output_tokens: 32
    parallel: [1, 4]
    min_requests: 8
    max_requests: 24
    max_duration_s: 10
"""
# the per-slot test reads the whole card: the prefix cache and the saturation probe too, each prompt length twice
SUITE = SHORT_SUITE.replace("    points: 6\n", "    points: 6\n    repeats: 2\n") + """\
  - kind: prefix
    name: prefix
    prefixes: 2
    prefix_tokens: 512
    suffix_tokens: 32
    output_tokens: 4
    warm_rounds: 2
  - kind: waves
    name: kv-waves
    prompt_tokens: 256
    output_tokens: 32
    max_wave: 8
    resolution: 2
"""
INIT = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line.strip()]


def _logged_layout(log: Path) -> tuple[int, int, bool]:
    match = INIT.search(log.read_text(errors="replace"))
    assert match, "llama-server did not log its slots"
    return int(match.group(1)), int(match.group(2)), match.group(3) == "true"


def _build(url: str, suite: Path, out: Path, *extra: str) -> tuple[dict, dict, str]:
    done = cardgen("build", "tiny-gguf", "--url", url, "--suite", str(suite), "--out", str(out), *extra, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return (json.loads((out / "run.json").read_text()), json.loads((out / "summary.json").read_text()),
            (out / "README.md").read_text())


def _check_requests(run: Path, info: dict, *, slot_ctx: int) -> list[dict]:
    """Every request succeeded, had exactly its target prompt (the server's count), fit a slot, and carries the
    engine's own account of it."""
    records = _records(run)
    assert records and all(r["error"] is None for r in records)
    assert all(r["prompt_tokens"] == r["prompt_tokens_target"] for r in records if r["kind"] != "prefix")
    assert all(r["prompt_tokens"] + r["output_tokens_target"] <= slot_ctx for r in records)  # nothing sent to fail
    assert all(r["output_tokens"] == r["output_tokens_target"] for r in records)  # ignore_eos forced the length
    for r in records:  # llama.cpp's own account of the request: its prompt, computed or cached, and its output
        t = r["engine_timings"]
        assert t["prompt_n"] + t["cache_n"] == r["prompt_tokens"] and t["predicted_n"] == r["output_tokens"]
        assert r["cached_tokens"] == t["cache_n"]
    ingest = [r for r in records if r["kind"] == "ingest"]
    assert ingest and all(r["cached_tokens"] == 0 for r in ingest)  # cache_prompt: false: every prompt computed
    assert info["server"]["dialect"] == {"length_fields": ["ignore_eos"], "cold_fields": {"cache_prompt": False},
                                         "rejected": {}}
    assert info["server"]["tokenizer"] == ("server /tokenize (content, special tokens added), checked against "
                                           "usage.prompt_tokens")
    return records


def _check_card(info: dict, summary: dict, card: str, *, slot_ctx: int) -> None:
    """What could not be had is named, and why."""
    too_long = next(p for p in info["points"] if p["name"] == "closed-in2100-out16-p1")
    assert too_long["stop"] == "skipped" and too_long["requests"] == 0
    assert f"2100 prompt + 16 output tokens exceed the {slot_ctx} tokens the server takes per request" in \
        too_long["detail"]
    assert any(w.startswith("ingest: prompts over") for w in info["warnings"])  # the sweep's lengths that do not fit
    kv = summary["kv_cache"]
    assert kv["not_run"]["usage_extrapolation"] == "the server's /metrics has no KV-usage gauge"
    # a cache per slot: no wave can fill it, whatever the waves' timing (a wave of 2 read as queued on CI)
    assert "requests queue behind the server's 4 slots, never for KV blocks" in kv["not_run"]["saturation_probe"]
    assert [e["method"] for e in kv["estimates"]] == ["server_config"]
    assert "usage\\_extrapolation: the server's /metrics has no KV-usage gauge" in card
    assert "measured its slots, not its KV cache" in card
    assert "not run: 2100 prompt + 16 output tokens exceed" in card
    # the prefix cache's hit rate from each request's own cached_tokens (llama.cpp's counters are rounded)
    assert "Hit rate as the server counts it, in prompt tokens, over each phase (usage.prompt\\_tokens\\_details" \
        ".cached\\_tokens of each request)" in card


def test_per_slot_cache_through_url(llama_server, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    with llama_server(f"-np {SLOTS} -c {CTX}") as server:
        props = requests.get(f"{server.url}/props", timeout=10).json()
        info, summary, card = _build(server.url, suite, tmp_path / "run")
    slots, slot_ctx, unified = _logged_layout(server.log_path)
    assert (slots, slot_ctx, unified) == (SLOTS, CTX // SLOTS, False)
    assert props["total_slots"] == slots and props["default_generation_settings"]["n_ctx"] == slot_ctx
    assert info["server"]["context"]["tokens"] == slot_ctx
    _check_requests(tmp_path / "run", info, slot_ctx=slot_ctx)
    assert summary["kv_cache"]["tokens"] == slots * slot_ctx == CTX  # what the server allocated
    assert summary["kv_cache"]["method"] == "server_config"
    assert "a cache per slot" in summary["kv_cache"]["estimates"][0]["source"]
    _check_card(info, summary, card, slot_ctx=slot_ctx)


def test_unified_cache_through_url(llama_server, tmp_path):
    """No ``-np``: four slots sharing one cache; every slot reports the whole pool, which is the capacity (the
    sum over slots would be four times too large)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(SHORT_SUITE.replace("max_prompt_tokens: 3000", "max_prompt_tokens: 1800"))
    with llama_server("-c 2048") as server:
        info, summary, _ = _build(server.url, suite, tmp_path / "run")
    slots, slot_ctx, unified = _logged_layout(server.log_path)
    assert (slots, slot_ctx, unified) == (4, 2048, True)
    assert summary["kv_cache"]["tokens"] == slot_ctx  # one pool
    assert "4 slots sharing one cache of 2,048 tokens" in summary["kv_cache"]["estimates"][0]["source"]
    assert "command line" in summary["kv_cache"]["estimates"][0]["source"]
    _check_requests(tmp_path / "run", info, slot_ctx=slot_ctx)


def test_launch_picks_slots_and_context_for_the_suite(llamacpp_bin, tiny_gguf, tmp_path):
    """``--launch llamacpp`` with the GGUF as the model: a slot per parallel request of the suite, each slot the
    suite's longest request, a cache per slot; run.json and the card say what it chose and why."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(SHORT_SUITE)
    env = {**os.environ, "CARDGEN_LLAMA_SERVER": str(llamacpp_bin / "llama-server")}
    run = tmp_path / "run"
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cardgen", "build", str(tiny_gguf), "--launch", "llamacpp", "--suite",
                           str(suite), "--out", str(run)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads((run / "run.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    card = (run / "README.md").read_text()
    assert info["model"] == tiny_gguf.stem
    chosen = info["server"]["launch"]["chosen"]
    # the longest request that fits the model's 16,384-token training context: the too-long point included
    assert chosen["-np"] == "4: the suite's largest parallel count (closed-in256-out32-p4)"
    assert chosen["-c"].startswith("12288: 4 slots x 3072 tokens, the suite's longest request (ingest: 3001 tokens)")
    slots, slot_ctx, unified = _logged_layout(run / "server.log")
    assert (slots, slot_ctx, unified) == (4, 3072, False)
    assert summary["kv_cache"]["tokens"] == 12288 and "the server's log" in summary["kv_cache"]["estimates"][0][
        "source"]
    records = _check_requests(run, info, slot_ctx=slot_ctx)
    assert any(r["scenario"] == "closed-in2100-out16-p1" for r in records)  # it fits the chosen slots
    assert "chosen -np" in card and "the suite's largest parallel count" in card


PROMPT_EVAL = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
TIME_SUITE = """\
name: llamacpp-time
endpoint: completions
timeout_s: 120
scenarios:
  - kind: ingest
    name: ingestion
    min_prompt_tokens: 64
    max_prompt_tokens: 1800
    points: 6
    output_tokens: 1
  - kind: closed
    name: pair
    prompt_tokens: 512
    output_tokens: 16
    parallel: [1, 2]
    min_requests: 6
    max_requests: 12
    max_duration_s: 10
"""


def test_prompt_compute_is_what_the_server_logged_with_and_without_its_host_cache(llama_server, tmp_path):
    """Each request's prompt compute on the card is llama-server's own "prompt eval time" for it (its log, which
    rounds to 0.01 ms); run once with the host prompt cache (--cache-ram, on by default) and once without, the
    card splits each TTFT the same way, and cardgen diff says which part changed."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(TIME_SUITE)
    runs = {}
    for name, extra in (("cache-ram-default", ""), ("cache-ram-0", " --cache-ram 0")):
        with llama_server(f"-np 2 -c 4096{extra}", log=f"{name}.log") as server:
            info, summary, card = _build(server.url, suite, tmp_path / name)
        logged = [(int(n), float(ms)) for ms, n in PROMPT_EVAL.findall(server.log_path.read_text(errors="replace"))]
        records = _records(tmp_path / name)
        for r in records:  # every request's own account is one the server logged
            t = r["engine_timings"]
            assert any(n == t["prompt_n"] and abs(ms - t["prompt_ms"]) <= 0.006 for n, ms in logged), (t, name)
        tb = summary["time_budget"]
        assert tb["available"] and tb["sources"] == [
            "llama.cpp's per-request timings",
            "the client's TTFT less queue and prompt compute: the engine says nothing of the rest"]
        for b in tb["points"]:
            parts = {p["part"]: p for p in b["parts"]}
            assert set(parts) == {"prompt", "outside_engine"}  # llama.cpp says nothing of the rest
            rows = [r for r in records if r["scenario"] == b["scope"]]
            assert parts["prompt"]["seconds"] == pytest.approx(
                sum(r["engine_timings"]["prompt_ms"] for r in rows) / 1000 / len(rows))
        assert "Outside the engine's account" in card and "llama.cpp's per-request timings" in card
        runs[name] = tmp_path / name
    done = cardgen("diff", str(runs["cache-ram-default"]), str(runs["cache-ram-0"]), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "TTFT part: prompt compute (s)" in done.stdout and "TTFT part: outside the engine's account" in done.stdout
    assert "TTFT: the part that changed most is" in done.stdout
