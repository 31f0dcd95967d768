"""What an engine says of its scheduler (``EngineAdapter.scheduler_settings``), for a calibration to read rather
than fit: vLLM's cache config, launch arguments, log and V1 defaults; the virtual server's /cardgen/sim."""

from __future__ import annotations

from cardgen.engines import get_adapter
from cardgen.sim.config import SimConfig, build_perf
from cardgen.sim.drive import drive, probe_answer

CACHE = {"vllm:cache_config_info": [{"labels": {"block_size": "128", "num_gpu_blocks": "256",
                                                "kv_cache_size_tokens": "32768"}, "value": 1.0}]}


def test_vllm_v1_says_its_cache_and_its_defaults_by_device():
    vllm = get_adapter("vllm")
    cpu = vllm.scheduler_settings(CACHE, {}, {"server_reported": {"engine_config": {"device_config": "cpu"}}},
                                  version="0.32.0")
    assert cpu["kv_capacity_tokens"] == (32768, "vllm:cache_config_info kv_cache_size_tokens")
    assert cpu["block_size"][0] == 128
    assert cpu["max_num_seqs"][0] == 128 and cpu["max_num_batched_tokens"][0] == 2048
    assert "CPU" in cpu["max_num_seqs"][1] and cpu["chunked_prefill"][0] is True
    large = vllm.scheduler_settings({}, {}, None, version="0.10.1", device="large-gpu")
    assert (large["max_num_seqs"][0], large["max_num_batched_tokens"][0]) == (1024, 8192)
    assert "kv_capacity_tokens" not in large  # nothing said: left out
    other = vllm.scheduler_settings({}, {}, None, version=None, device="gpu")
    assert (other["max_num_seqs"][0], other["max_num_batched_tokens"][0]) == (256, 2048)


def test_vllm_launch_arguments_and_log_win_over_defaults_and_v0_has_none():
    vllm = get_adapter("vllm")
    launch = {"arguments": {"max_num_seqs": "64", "no_enable_chunked_prefill": True},
              "server_reported": {"engine_config": {"enable_chunked_prefill": "True"}}}
    said = vllm.scheduler_settings({}, {}, launch, version="0.9.0", device="gpu")
    assert said["max_num_seqs"] == (64, "launch argument --max-num-seqs")
    assert said["chunked_prefill"] == (False, "launch argument --no-enable-chunked-prefill")
    assert said["max_num_batched_tokens"][0] == 2048  # not given: the default
    assert vllm.scheduler_settings({}, {}, None, version="0.6.3") == {}  # V0's depend on the context: unsaid


def test_the_virtual_server_says_its_scheduler_not_its_speed():
    config = SimConfig(model="CodeLlama-7b", gpu="A100-80GB", engine="vllm-0.6")
    perf = build_perf(config)
    server = probe_answer(config, perf, started_unix=0.0)
    scrape = drive([], config, perf=perf).scrapes[0]
    said = get_adapter(server.engine).scheduler_settings(scrape.samples, server.extra, None,
                                                         version=server.engine_version)
    assert said["chunked_prefill"] == (False, "/cardgen/sim scheduler policy")
    assert said["max_num_batched_tokens"][0] == perf.max_num_batched_tokens
    assert said["kv_capacity_tokens"][0] == perf.kv_capacity_tokens
    assert set(said) == {"kv_capacity_tokens", "block_size", "max_num_seqs", "max_num_batched_tokens",
                         "chunked_prefill"}
