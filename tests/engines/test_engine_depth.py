"""Speed at context depth (the ``depth`` kind) measured on the real engines: llama.cpp's ``llama-server`` on the
tiny random-weight GGUF, with its prompt cache and without it (``--no-cache-prompt``: the whole prompt is computed
again, and the card says so), a depth beyond its context listed as not run; and the session's vLLM (CPU build,
prefix caching on), whose reuse is read from its prefix-cache hit counter. The figures are printed for the report
(``pytest -rP``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import cardgen
from test_engine_e2e import build_against

from cardgen.kinds.depth.analysis import NO_CONTEXT, NOT_REUSED, REUSED, DepthSpeeds

pytestmark = pytest.mark.engine

CTX = 4096  # -np 1 -c 4096: one slot of 4,096 tokens
SUITE = """\
name: depth-engine
endpoint: completions
timeout_s: 120
scenarios:
  - {kind: depth, depths: [0, 1024, 3072, 8192], prompt_tokens: 64, output_tokens: 16, repeats: 3}
"""


def _build(url: str, suite_text: str, tmp_path: Path) -> tuple[list[dict], DepthSpeeds, str]:
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text)
    out = tmp_path / "run"
    done = cardgen("build", "tiny-gguf", "--url", url, "--suite", str(suite), "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    card = (out / "README.md").read_text("utf-8")
    print(card.split("## Speed at context depth")[1].split("\n## ")[0])
    return records, DepthSpeeds.model_validate(summary["kinds"]["depth"]), card


def test_llamacpp_reuses_the_context_and_ingests_only_the_new_tokens(llama_server, tmp_path):
    with llama_server(f"-np 1 -c {CTX}") as server:
        records, result, card = _build(server.url, SUITE, tmp_path)
    by_depth = {p.depth: p for p in result.points}
    assert [p.depth for p in result.points] == [0, 1024, 3072, 8192]
    assert by_depth[0].reuse == NO_CONTEXT and by_depth[0].not_run is None
    for d in (1024, 3072):
        p = by_depth[d]
        assert (p.requests, p.failed, p.not_run) == (3, 0, None)
        assert p.reuse == REUSED and "cached_tokens" in (p.reuse_from or "")
        assert p.cached_tokens is not None and d <= p.cached_tokens < d + 64  # the prefix, never the new tokens
        # llama.cpp's own account: it computed the new tokens only (its prompt_n), the fill the whole prompt
        at_depth = [r for r in records if r["scenario"] == p.scenario and r["phase"] == "depth"]
        fill = next(r for r in records if r["scenario"] == p.scenario and r["phase"] == "fill")
        assert all(r["engine_timings"]["prompt_n"] < 64 + 16 for r in at_depth)
        assert fill["engine_timings"]["prompt_n"] > d
        assert p.ingest_tok_s.p50 and p.decode_tok_s.p50 and p.engine_ingest_tok_s and p.engine_decode_tok_s
        assert p.fill_ttft_s is not None and p.ttft_s.p50 is not None and p.ttft_s.p50 < p.fill_ttft_s
    beyond = by_depth[8192]
    assert beyond.not_run is not None and beyond.not_run.startswith("not run:") and str(CTX) in beyond.not_run
    assert not any(r["scenario"] == beyond.scenario for r in records)  # nothing was sent to fail
    assert "## Speed at context depth" in card and "no prefix cache" not in card


def test_llamacpp_without_its_prompt_cache_computes_the_whole_prompt_and_the_card_says_so(llama_server, tmp_path):
    suite = SUITE.replace("[0, 1024, 3072, 8192]", "[0, 2048]")
    with llama_server(f"-np 1 -c {CTX} --no-cache-prompt") as server:
        _, result, card = _build(server.url, suite, tmp_path)
    deep = next(p for p in result.points if p.depth == 2048)
    assert deep.requests == 3 and deep.reuse == NOT_REUSED
    assert "**The server has no prefix cache for these requests**: at depth 2,048" in card


def test_vllm_reuses_the_context_by_its_hit_counter(vllm_server, tmp_path_factory):
    suite = SUITE.replace("[0, 1024, 3072, 8192]", "[0, 1024]")
    out, _, _ = build_against(vllm_server, tmp_path_factory, "depth", suite)
    result = DepthSpeeds.model_validate(json.loads((out / "summary.json").read_text())["kinds"]["depth"])
    card = (out / "README.md").read_text("utf-8")
    print(card.split("## Speed at context depth")[1].split("\n## ")[0])
    deep = next(p for p in result.points if p.depth == 1024)
    assert deep.requests == 3 and deep.reuse == REUSED
    assert deep.cached_tokens is not None and deep.cached_tokens >= 1024 - 16  # whole blocks of the prefix
    assert deep.decode_tok_s.p50 and deep.ingest_tok_s.p50
