"""The fitted server's scheduler: what the server says, and what it does not say taken from the starting profile,
saying so."""

from __future__ import annotations

from cardgen.calibrated.settings import device_class, read_settings
from cardgen.schemas.run import ServerInfo
from cardgen.sim.hardware import find_gpu
from cardgen.sim.roofline import build_perf_model


def test_unsaid_settings_are_assumed_from_the_starting_profile_and_say_so():
    start = build_perf_model(model="CodeLlama-7b", model_config=None, gpu="A100-80GB", engine="vllm")
    server = ServerInfo(url="http://x", engine="openai-compatible", served_model="m",
                        models={"data": [{"id": "m", "max_model_len": 4096}]})
    s = read_settings(server, [], start=start, start_label="the vllm profile on A100-80GB")
    assert s.max_model_len == 4096 and s.sources["max_model_len"] == "/v1/models max_model_len"
    assert s.kv_capacity_tokens == start.kv_capacity_tokens
    assert s.sources["kv_capacity_tokens"].startswith("assumed: the vllm profile on A100-80GB")
    assert [x.name for x in s.described()] == ["kv_capacity_tokens", "block_size", "max_num_seqs",
                                                "max_num_batched_tokens", "chunked_prefill", "max_model_len"]


def test_device_class_follows_vllms_rule():
    assert device_class(find_gpu("H100")) == "large-gpu"
    assert device_class(find_gpu("A100-80GB")) == "gpu"  # vLLM leaves A100s out
    assert device_class(find_gpu("L4")) == "gpu"
