"""The generic OpenAI-compatible path against a real server: Hugging Face's ``transformers serve
--continuous-batching`` on the tiny random-weight Llama (``hf_serve.py``). It has no ``/tokenize`` and no
``/metrics``, refuses vLLM's ``ignore_eos`` and ``min_tokens`` with 422, and ends its streams without ``[DONE]``.

cardgen must size prompts from ``usage.prompt_tokens``, force the output length with what the server takes (its
``generation_config``), show every figure the requests alone give, and name each one that needed what the server
does not offer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from clirun import cardgen
from hf_serve import FORCE_LENGTH, KV_TOKENS, HfServe, hf_serve, missing_requirement

# one at a time, with no other test beside them: what the load does depends on the server's speed (a point cut
# off by its time bound, the saturation probe's waves), and on two shared cores it did otherwise
pytestmark = pytest.mark.engine

SUITE = """\
name: generic-short
endpoint: completions
timeout_s: 120
scenarios:
  - kind: ingest
    name: ingestion
    min_prompt_tokens: 16
    max_prompt_tokens: 600
    points: 4
    output_tokens: 1
  - kind: closed
    name: pair
    prompt_tokens: 128
    output_tokens: 24
    parallel: [1, 4]
    min_requests: 8
    max_requests: 16
    max_duration_s: 10
  - kind: waves
    name: kv-waves
    prompt_tokens: 128
    output_tokens: 24
    max_wave: 4
    resolution: 2
"""


@pytest.fixture(scope="module")
def hf_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HfServe]:
    missing = missing_requirement()
    if missing:
        pytest.fail(missing, pytrace=False)
    with hf_serve(tiny_model, log_path=tmp_path_factory.mktemp("hf") / "hf-serve.log", startup_timeout_s=180) as s:
        yield s
    assert "stopped by SIGTERM" in s.log_path.read_text()


def _events(raw: bytes) -> list[str]:
    return [block[len("data: "):] for block in raw.decode().split("\n\n") if block.startswith("data: ")]


def test_the_server_is_what_cardgen_must_cope_with(hf_server: HfServe, tiny_model: Path) -> None:
    """The server's own behaviour, as the generic path assumes it (if a release changes it, this says so)."""
    from transformers import AutoTokenizer

    prompt = "The quick brown fox jumps over the lazy dog."
    tokens = len(AutoTokenizer.from_pretrained(str(tiny_model))(prompt)["input_ids"])
    for path in ("/tokenize", "/metrics"):
        assert requests.get(hf_server.url + path, timeout=5).status_code == 404
    rejected = requests.post(hf_server.url + "/v1/completions", timeout=30,
                             json={"prompt": prompt, "max_tokens": 4, "ignore_eos": True})
    assert rejected.status_code == 422 and "ignore_eos" in rejected.json()["detail"]
    body = {"model": hf_server.served_model, "prompt": prompt, "max_tokens": 16, "stream": True,
            "stream_options": {"include_usage": True}, **FORCE_LENGTH}
    with requests.post(hf_server.url + "/v1/completions", json=body, stream=True, timeout=60) as response:
        assert response.status_code == 200
        events = _events(b"".join(response.iter_content(chunk_size=None)))
    assert "[DONE]" not in events  # this server never sends it
    last = json.loads(events[-1])
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"] == {"prompt_tokens": tokens, "completion_tokens": 16, "total_tokens": tokens + 16}


def test_a_card_from_the_requests_alone(hf_server: HfServe, tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    run = tmp_path / "run"
    done = cardgen("build", hf_server.served_model, "--url", hf_server.url, "--suite", str(suite), "--out", str(run),
                   timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads((run / "run.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    card = (run / "README.md").read_text()
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]

    server = info["server"]
    assert server["engine"] == "openai-compatible"
    assert server["tokenizer"] == "usage.prompt_tokens of 1-token requests"  # no /tokenize to ask
    assert server["dialect"]["length_fields"] == ["generation_config"]
    assert set(server["dialect"]["rejected"]) == {"min_tokens", "ignore_eos"}
    assert all(why.startswith("HTTP 422") for why in server["dialect"]["rejected"].values())
    assert any("refused ignore_eos, min_tokens" in w for w in info["warnings"])
    assert server["context"] is None and any(w.startswith("the server states no context per request") for w in
                                             info["warnings"])

    assert records and all(r["error"] is None for r in records)  # a stream without [DONE] is complete
    assert all(r["prompt_tokens"] == r["prompt_tokens_target"] for r in records)  # sized by the server's usage
    assert all(r["output_tokens"] == r["output_tokens_target"] for r in records)  # its generation_config forced it
    assert all(r["engine_timings"] is None for r in records)  # it reports nothing of its own per request

    # every figure the requests alone give
    assert summary["ingestion"]["tok_s"] > 0
    closed = [s for s in summary["scenarios"] if s["kind"] == "closed"]
    assert [s["requests"] > 0 and s["speed_from_start_tok_s"]["p50"] > 0 for s in closed] == [True, True]
    # ... and what needed the server's own metrics, named
    kv = summary["kv_cache"]
    assert kv["tokens"] is None and kv["lower_bound"] is not None  # the waves never saturated its 32k tokens
    assert kv["lower_bound"] < KV_TOKENS
    assert kv["not_run"]["server_config"].startswith("the server declares no KV capacity")
    assert kv["not_run"]["usage_extrapolation"] == "the server has no /metrics to read a KV usage from"
    assert any("KV cache capacity: only a lower bound" in m and "server_config" in m for m in summary["missing"])
    assert "the server has no Prometheus /metrics: no server-side figures (KV usage, queue)" in card
    assert "server\\_config: the server declares no KV capacity" in card
    # where the time goes: the server says nothing of its own time, and the card says which parts that leaves out
    assert summary["time_budget"]["available"] is False
    assert ("## Where the time goes\n\nNot available: queue, prompt compute, other server time and network could not "
            "be told apart: the engine gives no account of its own time (no per-request timings in its responses, no "
            "queue, prefill or TTFT histogram in /metrics).") in card


STRUCTURED_SUITE = """\
name: generic-structured
endpoint: chat
timeout_s: 120
scenarios:
  - {kind: structured, schemas: [flat, tools], prompt_tokens: 32, output_tokens: 24, parallel: [1], rounds: 1}
"""


def test_the_structured_kind_through_the_generic_path(hf_server: HfServe, tmp_path: Path) -> None:
    # the structured kind on a server that is neither vLLM nor llama.cpp: transformers serve takes response_format
    # and tools and answers as if they were not there (a random model's text: no JSON, no call). The build ends
    # with both arms measured, every answer judged, and the card says the server seems to ignore the constraint
    suite = tmp_path / "suite.yaml"
    suite.write_text(STRUCTURED_SUITE)
    run = tmp_path / "run"
    done = cardgen("build", hf_server.served_model, "--url", hf_server.url, "--suite", str(suite), "--out", str(run),
                   "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    result = json.loads((run / "summary.json").read_text())["kinds"]["structured"]
    card = (run / "README.md").read_text()
    section = card.split("## Structured output and tool calls")[1].split("\n## ")[0]
    print(section)  # what this server made of the fields, for the report (pytest -rP)
    assert result["backend"] is None and "Structured-output backend: not said by the server." in section
    assert [p["schema_name"] for p in result["points"]] == ["flat", "tools"]
    for p in result["points"]:
        assert [(a["arm"], a["requests"], a["failed"]) for a in p["arms"]] == [("constrained", 1, 0), ("free", 1, 0)]
        assert p["unsupported"] is None and p["answered"] == 2 and p["valid"] == 0 and p["cut_off"] == 0
        assert p["ignored"] is not None and p["ignored"] in section, p
        assert ("began as JSON" if p["schema_name"] == "flat" else "made a tool call") in p["ignored"]
