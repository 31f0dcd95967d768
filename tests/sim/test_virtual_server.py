"""The virtual server's behaviour in virtual time, in process: its ``/metrics`` text (the families, counters and
histograms the real-time server answers, from the same :class:`SimMetrics` and scheduler), the KV cache a running
request holds and what an abort frees, and the modelled times of one request. No clock, no socket: what is left
over HTTP (tests/sim/test_server.py) is the HTTP layer and the real-time server's own timing."""

from __future__ import annotations

import pytest
from simclient import FIXED, MODEL

from cardgen.promtext import parse_metrics
from cardgen.schemas.records import MetricSample
from cardgen.sim.config import SimConfig, cache_config_labels, max_model_len
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import FixedPerf
from cardgen.sim.virtual import VirtualServer

PERF = FixedPerf(**FIXED)
BLOCKS = FIXED["kv_capacity_tokens"] // FIXED["block_size"]


def server() -> VirtualServer:
    """The fixture server of test_server.py (simclient's FIXED), with the metrics its ``/metrics`` renders."""
    labels = cache_config_labels(PERF, max_len=max_model_len(SimConfig(model=MODEL, perf="fixed"), PERF))
    return VirtualServer(PERF, metrics=SimMetrics(model_name=MODEL, cache_config=labels))


def scrape(sim: VirtualServer) -> MetricSample:
    """What ``/metrics`` answers now, parsed as the scraper parses it (with the Prometheus client's parser)."""
    assert sim.metrics is not None
    return MetricSample(t=0.0, samples=parse_metrics(sim.metrics.render(sim.scheduler)))


def test_metrics_parse_and_count() -> None:
    sim = server()
    before = scrape(sim)
    info = before.samples["vllm:cache_config_info"]
    assert len(info) == 1 and info[0]["value"] == 1.0
    labels = info[0]["labels"]
    assert labels["block_size"] == "16" and labels["num_gpu_blocks"] == str(BLOCKS)
    assert labels["kv_cache_size_tokens"] == str(FIXED["kv_capacity_tokens"])
    assert labels["enable_prefix_caching"] == "True" and "gpu_memory_utilization" in labels
    sim.submit(9, 11)
    sim.run()
    after = scrape(sim)
    for name, n in (("vllm:prompt_tokens_total", 9), ("vllm:generation_tokens_total", 11)):
        assert after.value(name, model_name=MODEL) - before.value(name, model_name=MODEL) == n
    count = "vllm:time_to_first_token_seconds_count"
    assert after.value(count) - before.value(count) == 1
    assert after.value("vllm:inter_token_latency_seconds_count") == 10  # the gaps between 11 tokens
    assert after.value("vllm:e2e_request_latency_seconds_count") == 1
    assert after.value("vllm:request_success_total", finished_reason="length") == 1
    assert after.value("vllm:num_requests_running") == 0 and after.value("vllm:kv_cache_usage_perc") == 0
    for name in ("vllm:num_requests_waiting", "vllm:num_preemptions_total", "vllm:inter_token_latency_seconds_sum",
                 "vllm:request_queue_time_seconds_count", "cardgen_sim_emit_lag_seconds_count"):
        assert name in after.samples


def test_kv_usage_while_running_and_an_abort_frees_the_blocks() -> None:
    sim = server()
    seq = sim.submit(700, 1000)
    sim.step()  # the prefill step: the prompt and the first token
    sim.step()
    running = scrape(sim)
    assert running.value("vllm:num_requests_running") == 1
    # 700 prompt tokens and the 2 generated hold 44 of the 256 blocks (the real-time server, scraped at any moment
    # of its first steps, shows 44 or 45)
    assert running.value("vllm:kv_cache_usage_perc") == 44 / BLOCKS
    sim.scheduler.abort(seq, sim.now)  # what the real-time server does when the client goes away
    after = scrape(sim)
    assert after.value("vllm:request_success_total", finished_reason="abort") == 1
    assert after.value("vllm:num_requests_running") == 0 and after.value("vllm:kv_cache_usage_perc") == 0
    assert not sim.has_work


def test_one_request_follows_the_modelled_times() -> None:
    """TTFT = step overhead + prompt / prefill rate, then one decode step per token: what the real-time server's
    stamps follow (test_server.py checks its stamps against the same figures, within its clock's margin)."""
    sim = server()
    sim.submit(500, 30)
    (r,) = sim.run()
    assert r.ttft_s == pytest.approx(FIXED["step_overhead_s"] + 500 / FIXED["prefill_tok_s"])
    step = FIXED["step_overhead_s"] + FIXED["per_seq_s"]
    gaps = [b - a for a, b in zip(r.times, r.times[1:], strict=False)]
    assert len(r.times) == 30 and gaps == pytest.approx([step] * 29)
