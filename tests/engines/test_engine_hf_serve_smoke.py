"""``transformers serve --continuous-batching`` (hf_serve.py) starts on the tiny model and streams a completion
whose last chunk carries ``usage``, the way the generic-server path of cardgen expects to read it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests
from hf_serve import FORCE_LENGTH, KV_TOKENS, hf_serve, missing_requirement

pytestmark = pytest.mark.engine


def sse_events(raw: bytes) -> list[str]:
    return [block[len("data: "):] for block in raw.decode().split("\n\n") if block.startswith("data: ")]


def test_hf_serve_streams_a_completion_with_usage(tiny_model: Path, tmp_path: Path) -> None:
    missing = missing_requirement()
    if missing:
        pytest.fail(missing, pytrace=False)
    from transformers import AutoTokenizer

    prompt = "The quick brown fox jumps over the lazy dog."
    expected_prompt_tokens = len(AutoTokenizer.from_pretrained(str(tiny_model))(prompt)["input_ids"])
    started = time.monotonic()
    with hf_serve(tiny_model, log_path=tmp_path / "hf-serve.log", startup_timeout_s=60) as server:
        assert requests.get(server.url + "/health", timeout=5).json() == {"status": "ok"}
        for path in ("/tokenize", "/metrics"):
            assert requests.get(server.url + path, timeout=5).status_code == 404
        rejected = requests.post(server.url + "/v1/completions", timeout=30,
                                 json={"prompt": prompt, "max_tokens": 4, "ignore_eos": True})
        assert rejected.status_code == 422 and "ignore_eos" in rejected.json()["detail"]

        body = {"model": server.served_model, "prompt": prompt, "max_tokens": 16, "stream": True,
                "stream_options": {"include_usage": True}, **FORCE_LENGTH}
        with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = b"".join(response.iter_content(chunk_size=None))
        events = sse_events(raw)
        assert "[DONE]" not in events  # this server never sends it
        chunks = [json.loads(event) for event in events]
        last = chunks[-1]
        assert last["choices"][0]["finish_reason"] == "length"
        assert last["usage"] == {"prompt_tokens": expected_prompt_tokens, "completion_tokens": 16,
                                 "total_tokens": expected_prompt_tokens + 16}
        assert all("usage" not in chunk for chunk in chunks[:-1])
        assert "".join(chunk["choices"][0]["text"] for chunk in chunks)
        assert {chunk["model"] for chunk in chunks} == {server.response_model}
        kv = server.kv_log()
        assert kv is not None and kv["num_sectors"] * 256 == KV_TOKENS
    assert time.monotonic() - started < 60
    assert "stopped by SIGTERM" in server.log_path.read_text()
