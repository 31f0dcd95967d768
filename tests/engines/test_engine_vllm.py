"""vLLM for real: its CPU build serving the tiny random-weight Llama, started through launched_engine().

One server for the session (conftest.vllm_server). Marked ``engine``: ``make test-engine`` installs vLLM first.
"""

from __future__ import annotations

import json

import pytest
import requests
from engine_helpers import KV_BLOCKS, SERVED_NAME, TINY_MAX_POSITIONS

from cardgen.engines import counter, get_adapter, histogram_delta, kv_config, load_gauges, metric_names, probe

pytestmark = pytest.mark.engine


def metrics(url: str) -> str:
    resp = requests.get(f"{url}/metrics", timeout=10)
    resp.raise_for_status()
    return resp.text


def stream_completion(url: str, prompt: str, max_tokens: int) -> tuple[dict, float, float]:
    """One streamed completion; returns (usage, client TTFT s, client end-to-end s)."""
    import time

    body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.monotonic()
    first = None
    usage: dict = {}
    with requests.post(f"{url}/v1/completions", json=body, stream=True, timeout=120) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and any(c.get("text") for c in chunk.get("choices", [])):
                first = time.monotonic()
            if chunk.get("usage"):
                usage = chunk["usage"]
    end = time.monotonic()
    assert first is not None, "no text-bearing chunk"
    return usage, first - sent, end - sent


def test_tiny_model_is_a_small_llama_autotokenizer_loads(tiny_model):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_model)
    assert (config.model_type, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.vocab_size, config.max_position_embeddings) == ("llama", 256, 4, 4, 4096, TINY_MAX_POSITIONS)
    assert (tiny_model / "model.safetensors").stat().st_size < 16 * 2**20  # ~5.5M bf16 parameters
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert len(tok) == 4096 and tok.bos_token_id == 1 and tok.eos_token_id == 2
    ids = tok("def main(argv): return 0").input_ids
    assert ids[0] == 1 and tok.decode(ids, skip_special_tokens=True) == "def main(argv): return 0"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<|assistant|>\n") and "hi" in chat


def test_greedy_single_tokens_always_carry_text(vllm_server, tiny_model):
    """The tiny model's silent tokens (special, partial UTF-8) have zero output rows, so a one-token request (the
    ingestion sweep sends many) never streams only ``content: ""``."""
    from safetensors import safe_open

    from cardgen.engines.tinymodel import silent_token_ids

    silent = silent_token_ids(tiny_model)
    assert 3 <= len(silent) < 300
    with safe_open(tiny_model / "model.safetensors", framework="pt") as weights:
        head = weights.get_tensor("lm_head.weight")
    assert float(head[silent].abs().max()) == 0.0
    for i in range(20):
        usage, _, _ = stream_completion(vllm_server.url, f"{i} " + "lorem ipsum dolor " * (i % 7 + 1), 1)
        assert usage["completion_tokens"] == 1


def test_probe_detects_vllm_and_its_version(vllm_server):
    info = probe(vllm_server.url)
    assert info.engine == "vllm"
    assert info.engine_version == get_adapter("vllm").installed_version() == vllm_server.launch_info[
        "engine_version"]
    assert info.served_model == SERVED_NAME
    assert info.extra["cache_config"]["kv_cache_size_tokens"] not in (None, "None")


def test_launch_info_is_the_parameters_table(vllm_server):
    info = vllm_server.launch_info
    assert info["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    args = info["arguments"]
    assert args["host"] == "127.0.0.1" and args["port"] == str(info["port"])
    assert args["enforce_eager"] is True and args["distributed_executor_backend"] == "uni"
    assert args["served_model_name"] == SERVED_NAME
    reported = info["server_reported"]
    assert reported["non_default_args"]["served_model_name"] in (SERVED_NAME, [SERVED_NAME])
    assert reported["engine_config"]["enforce_eager"] == "True"
    assert reported["engine_config"]["max_seq_len"] == str(TINY_MAX_POSITIONS)
    assert info["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert 0 < info["ready_after_s"] < 240


def test_kv_capacity_from_cache_config_info(vllm_server, tiny_model):
    kv = kv_config("vllm", metrics(vllm_server.url))
    assert kv["source"] == "vllm:cache_config_info kv_cache_size_tokens"
    assert kv["num_gpu_blocks"] == KV_BLOCKS and kv["labels"]["num_gpu_blocks_override"] == str(KV_BLOCKS)
    assert kv["tokens"] == kv["num_gpu_blocks"] * kv["block_size"] == KV_BLOCKS * 128
    # within the memory reserved (VLLM_CPU_KVCACHE_SPACE=1: 1 GiB); a token costs K and V for every layer in bf16
    config = json.loads((tiny_model / "config.json").read_text())
    bytes_per_token = 2 * config["num_hidden_layers"] * config["hidden_size"] * 2
    assert int(kv["labels"]["kv_cache_memory_bytes"]) == 2**30
    assert kv["tokens"] * bytes_per_token <= 2**30
    assert float(kv["labels"]["kv_cache_max_concurrency"]) == kv["tokens"] / TINY_MAX_POSITIONS


def test_token_counts_and_latency_agree_with_vllms_own_metrics(vllm_server):
    names = metric_names("vllm")
    lengths = [16, 24, 40]
    with vllm_server.lock:
        before = metrics(vllm_server.url)
        results = [stream_completion(vllm_server.url, f"request {i}: the quick brown fox " * (i + 1), n)
                   for i, n in enumerate(lengths)]
        after = metrics(vllm_server.url)
    usages = [u for u, _, _ in results]
    assert [u["completion_tokens"] for u in usages] == lengths  # ignore_eos forces the length
    assert counter(after, names["generation_tokens"]) - counter(before, names["generation_tokens"]) == sum(lengths)
    assert counter(after, names["prompt_tokens"]) - counter(before, names["prompt_tokens"]) == sum(
        u["prompt_tokens"] for u in usages)
    ttft = histogram_delta(before, after, names["ttft"])
    assert ttft["count"] == len(lengths)
    itl = histogram_delta(before, after, names["itl"])
    assert itl["count"] == sum(n - 1 for n in lengths)  # one gap between each pair of tokens
    # the client sees the server's TTFT plus the network and its own parsing: never less, not much more
    client_ttft = sum(t for _, t, _ in results) / len(results)
    assert client_ttft >= ttft["mean"] * 0.9
    assert client_ttft - ttft["mean"] < 0.5
    gauges = load_gauges("vllm", after)
    assert gauges["running"] == 0 and gauges["waiting"] == 0 and 0 <= gauges["usage"] <= 1
