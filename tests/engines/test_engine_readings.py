"""The adapters' pure readings (KV capacity, load gauges, histograms) on recorded ``/metrics`` text.

vLLM: text recorded from a real vLLM 0.32.0 CPU server (tests/data/engines/README.md). TGI and SGLang: written
after their documentation (they cannot run here). llama.cpp: responses recorded from a real llama-server.
"""

from __future__ import annotations

import json
import math

import pytest

from cardgen.engines import (
    ADAPTERS,
    counter,
    first_counter,
    get_adapter,
    histogram,
    histogram_delta,
    histogram_quantile,
    kv_config,
    load_gauges,
    metric_candidates,
    metric_names,
)
from cardgen.engines.base import samples_of, split_top_level
from cardgen.promtext import parse_metrics
from cardgen.redact import redact_mapping
from cardgen.schemas.records import MetricSample


def test_vllm_kv_config_reads_kv_cache_size_tokens_from_real_metrics(data_dir):
    text = (data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()
    kv = kv_config("vllm", text)
    assert kv["tokens"] == 262144
    assert kv["source"] == "vllm:cache_config_info kv_cache_size_tokens"
    assert kv["block_size"] == 128 and kv["num_gpu_blocks"] == 2048
    assert kv["labels"]["kv_cache_memory_bytes"] == "1073741824"


@pytest.mark.parametrize("form", ["text", "samples", "metric_sample", "metric_sample_json"])
def test_kv_config_accepts_every_form_of_a_scrape(data_dir, form):
    text = (data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()
    samples = parse_metrics(text)
    sample = {
        "text": text,
        "samples": samples,
        "metric_sample": MetricSample(t=1.0, samples=samples),
        "metric_sample_json": json.loads(MetricSample(t=1.0, samples=samples).model_dump_json()),
    }[form]
    assert kv_config("vllm", sample)["tokens"] == 262144


def test_vllm_kv_config_falls_back_to_blocks_times_block_size_on_older_versions():
    labels = {"block_size": "16", "num_gpu_blocks": "7000", "kv_cache_size_tokens": "None"}
    samples = {"vllm:cache_config_info": [{"labels": labels, "value": 1.0}]}
    kv = kv_config("vllm", samples)
    assert kv["tokens"] == 112000
    assert kv["source"] == "vllm:cache_config_info num_gpu_blocks x block_size"


def test_vllm_kv_config_uses_the_probe_when_the_scrape_lacks_it():
    extra = {"cache_config": {"block_size": "128", "num_gpu_blocks": "10", "kv_cache_size_tokens": "1280"}}
    assert kv_config("vllm", {}, extra)["tokens"] == 1280
    assert kv_config("vllm", {}, {}) is None


def test_vllm_gauges_and_the_renamed_usage_gauge(data_dir):
    text = (data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()
    assert load_gauges("vllm", text) == {"usage": 0.0, "running": 0.0, "waiting": 0.0, "used_tokens": None}
    old = {"vllm:gpu_cache_usage_perc": [{"labels": {}, "value": 0.25}],
           "vllm:num_requests_running": [{"labels": {"model_name": "a"}, "value": 3.0}],
           "vllm:num_requests_waiting": [{"labels": {"model_name": "a"}, "value": 1.0}]}
    assert load_gauges("vllm", old)["usage"] == 0.25
    both = {**old, "vllm:kv_cache_usage_perc": [{"labels": {}, "value": 0.5}]}
    assert load_gauges("vllm", both)["usage"] == 0.5


def test_vllm_counters_and_histograms_from_real_metrics(data_dir):
    text = (data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()
    names = metric_names("vllm")
    assert counter(text, names["generation_tokens"]) == 32.0
    assert counter(text, names["prompt_tokens"]) == 6.0
    ttft = histogram(text, names["ttft"])
    assert ttft["count"] == 1.0 and ttft["buckets"][-1][0] == math.inf and ttft["buckets"][-1][1] == 1.0
    itl = histogram(text, names["itl"])
    assert itl["count"] == 31.0
    assert 0 < itl["sum"] / itl["count"] < 1.0


def test_histogram_delta_and_quantile():
    def scrape(counts, total, n):
        out = {"h_bucket": [{"labels": {"le": le}, "value": c} for le, c in zip(["0.1", "0.2", "0.4", "+Inf"],
                                                                                  counts, strict=True)],
               "h_sum": [{"labels": {}, "value": total}], "h_count": [{"labels": {}, "value": n}]}
        return out

    before = scrape([1, 2, 2, 2], 0.3, 2)
    after = scrape([1, 6, 10, 10], 2.3, 10)
    delta = histogram_delta(before, after, "h")
    assert delta["count"] == 8 and delta["sum"] == pytest.approx(2.0) and delta["mean"] == pytest.approx(0.25)
    assert [c for _, c in delta["buckets"]] == [0, 4, 8, 8]
    assert histogram_quantile(delta, 0.5) == pytest.approx(0.2)  # rank 4 ends the (0.1, 0.2] bucket
    assert histogram_quantile(delta, 0.75) == pytest.approx(0.3)
    assert histogram_delta(None, after, "h")["count"] == 10
    assert histogram(after, "missing") is None


def test_tgi_kv_budget_is_the_max_total_tokens_gauge(data_dir):
    text = (data_dir / "tgi_metrics.txt").read_text()
    info = json.loads((data_dir / "tgi_info.json").read_text())
    kv = kv_config("tgi", text, {"info": info})
    assert kv == {"tokens": 152496, "source": "tgi_batch_max_total_tokens"}
    gauges = load_gauges("tgi", text)
    assert gauges["running"] == 17 and gauges["waiting"] == 3
    assert gauges["usage"] == pytest.approx(38122 / 152496)
    # TGI counters carry no `_total`; the Prometheus parser adds it to the sample name
    assert counter(text, metric_names("tgi")["requests"]) == 208
    assert histogram(text, metric_names("tgi")["e2e"])["count"] == 208


def test_tgi_before_2_3_had_the_budget_in_info():
    assert kv_config("tgi", {}, {"info": {"max_batch_total_tokens": 32000}}) == {
        "tokens": 32000, "source": "/info max_batch_total_tokens"}
    assert kv_config("tgi", {}, {"info": {}}) is None


def test_sglang_kv_from_gauge_then_server_info(data_dir):
    text = (data_dir / "sglang_metrics.txt").read_text()
    info = json.loads((data_dir / "sglang_server_info.json").read_text())
    assert kv_config("sglang", text, {"server_info": info})["source"] == "sglang:max_total_num_tokens"
    kv = kv_config("sglang", {}, {"server_info": info})
    assert kv["tokens"] == 471258 and kv["source"] == "/server_info max_total_num_tokens" and kv["page_size"] == 1
    assert kv["block_size"] == 1  # the page is SGLang's KV block
    gauges = load_gauges("sglang", text)
    assert gauges == {"usage": 0.28, "running": 64.0, "waiting": 12.0, "used_tokens": 131952.0}
    assert histogram(text, metric_names("sglang")["ttft"])["count"] == 256


def test_llamacpp_kv_needs_to_know_whether_the_slots_share_one_cache(data_dir):
    """/props and /slots say each slot's context, not whether the slots share one cache: the layout comes from
    the server's log or its command line; without either the capacity is unknown, and why is said."""
    props = json.loads((data_dir / "llamacpp_props.json").read_text())
    slots = json.loads((data_dir / "llamacpp_slots.json").read_text())
    n, n_ctx = props["total_slots"], slots[0]["n_ctx"]
    assert n == len(slots) and all(s["n_ctx"] == n_ctx for s in slots)
    endpoints = {"props": props, "slots": slots}
    assert kv_config("llamacpp", {}, endpoints) is None
    why = get_adapter("llamacpp").kv_unknown(endpoints)
    assert f"{n} slots of {n_ctx:,} tokens" in why and f"({n * n_ctx:,})" in why
    per_slot = {**endpoints, "process": {"pid": 7, "command": ["llama-server", "-m", "m.gguf", "-np", str(n)]}}
    kv = kv_config("llamacpp", {}, per_slot)
    assert (kv["tokens"], kv["kv_unified"], kv["slots"]) == (n * n_ctx, False, n)
    assert "a cache per slot" in kv["source"] and "command line (pid 7)" in kv["source"]
    for command in (["llama-server", "-m", "m.gguf"], ["llama-server", "-np", str(n), "--kv-unified"]):
        kv = kv_config("llamacpp", {}, {**endpoints, "process": {"pid": 7, "command": command}})
        assert (kv["tokens"], kv["kv_unified"]) == (n_ctx, True)
    env = {"pid": 7, "command": ["llama-server"], "env": {"LLAMA_ARG_N_PARALLEL": str(n)}}
    assert kv_config("llamacpp", {}, {**endpoints, "process": env})["kv_unified"] is False
    said = get_adapter("llamacpp").config_from_log(
        f"srv    load_model: initializing, n_slots = {n}, n_ctx_slot = {n_ctx}, kv_unified = 'true'\n")
    assert said == {"n_slots": n, "n_ctx_slot": n_ctx, "kv_unified": True}
    kv = kv_config("llamacpp", {}, {**per_slot, "log": said})  # the log beats the command line
    assert (kv["tokens"], kv["kv_unified"]) == (n_ctx, True) and "the server's log" in kv["source"]
    assert get_adapter("llamacpp").context_limit(None, endpoints, None) == (
        n_ctx, "/props default_generation_settings.n_ctx (the context of one slot)")
    text = (data_dir / "llamacpp_metrics.txt").read_text()
    gauges = load_gauges("llamacpp", text)
    assert gauges["running"] is not None and gauges["waiting"] is not None
    assert counter(text, metric_names("llamacpp")["generation_tokens"]) > 0


def test_generic_and_unknown_engines_know_nothing():
    assert kv_config("openai-compatible", {}) is None
    assert kv_config(None, {}) is None
    assert load_gauges("whatever", {}) == {"usage": None, "running": None, "waiting": None, "used_tokens": None}


def test_sim_reads_vllm_names_and_declares_its_kv_cache_as_vllm_does():
    assert get_adapter("sim").name == "cardgen-sim"
    extra = {"sim": {"perf": {"kind": "fixed", "kv_capacity_tokens": 65536}}}
    assert kv_config("cardgen-sim", {}, extra) is None  # --hide-cache-config hides it, as a vLLM could
    labels = {"block_size": "16", "num_gpu_blocks": "100", "kv_cache_size_tokens": "1600"}
    assert kv_config("cardgen-sim", {"vllm:cache_config_info": [{"labels": labels, "value": 1}]}, extra)[
        "tokens"] == 1600


def test_samples_of_rejects_what_it_cannot_read():
    with pytest.raises(TypeError):
        samples_of(42)
    assert samples_of(None) == {}


def test_redact_mapping_masks_keys_not_tokenizers():
    data = {"api_key": "sk-1", "admin_api_key": None, "hf_token": "hf_x", "tokenizer": "t", "eos_token": "</s>",
            "nested": [{"password": "p"}]}
    assert redact_mapping(data) == {"api_key": "***", "admin_api_key": None, "hf_token": "***", "tokenizer": "t",
                                    "eos_token": "</s>", "nested": [{"password": "***"}]}


def test_split_top_level_keeps_brackets_and_quotes_whole():
    assert split_top_level("a=1, b=[2, 3], c='x,y', d=F(e=1, f=2)") == ["a=1", "b=[2, 3]", "c='x,y'",
                                                                       "d=F(e=1, f=2)"]


def test_preemptions_and_renamed_metrics_are_the_adapters_knowledge(data_dir):
    text = (data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()
    assert first_counter(text, metric_candidates("vllm", "preemptions")) == 0.0
    assert metric_candidates("cardgen-sim", "preemptions") == ("vllm:num_preemptions_total",)
    retracted = {"sglang:num_retracted_requests_total": [{"labels": {"model_name": "a"}, "value": 2.0},
                                                         {"labels": {"model_name": "b"}, "value": 3.0}]}
    assert first_counter(retracted, metric_candidates("sglang", "preemptions")) == 5.0
    assert metric_candidates("tgi", "preemptions") == metric_candidates("llamacpp", "preemptions") == ()
    old = {"vllm:time_per_output_token_seconds_count": [{"labels": {}, "value": 4.0}]}
    assert first_counter(old, [f"{n}_count" for n in metric_candidates("vllm", "itl")]) == 4.0
    assert first_counter({}, ("vllm:num_preemptions_total",)) is None


def test_older_names_belong_to_roles_the_adapter_names():
    for adapter in ADAPTERS.values():
        assert isinstance(adapter.metric_names, dict) and isinstance(adapter.older_metric_names, dict)
        assert set(adapter.older_metric_names) <= set(adapter.metric_names)


def test_vllms_logged_arguments_are_read_with_a_config_objects_repr_as_its_text():
    # vLLM launched with --structured-outputs-config logs that argument as the config object's repr: no literal
    said = get_adapter("vllm").config_from_log(
        "INFO non-default args: {'model': '/m', 'port': 8000, 'structured_outputs_config': "
        "StructuredOutputsConfig(backend='xgrammar', disable_any_whitespace=True), 'seed': -1, 'x': [1, (2, 3)]}\n")
    assert said["non_default_args"] == {
        "model": "/m", "port": 8000, "seed": -1, "x": [1, [2, 3]],
        "structured_outputs_config": "StructuredOutputsConfig(backend='xgrammar', disable_any_whitespace=True)"}
