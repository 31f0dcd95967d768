"""The roofline performance model: physical bounds, memory plan, tensor parallel, errors."""

from __future__ import annotations

import json
import math

import pytest

from cardgen.errors import UsageError
from cardgen.sim.catalog import parse_hf_config
from cardgen.sim.hardware import find_gpu
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.roofline import (
    RooflinePerf,
    build_perf_model,
    find_engine,
    list_engines,
    list_gpus,
    list_models,
)


def perf(
    model: str = "CodeLlama-7b", gpu: str = "A100-80GB", tp: int = 1, engine: str = "vllm"
) -> RooflinePerf:
    p = build_perf_model(model=model, model_config=None, gpu=gpu, tp=tp, engine=engine)
    assert isinstance(p, RooflinePerf)
    return p


SETUPS = [
    ("CodeLlama-7b", "A100-80GB", 1),
    ("Llama-2-70b", "H100", 4),
    ("Qwen2.5-7B", "L4", 1),
    ("Mixtral-8x7B", "A100-80GB", 2),
    ("bloomz-1b1", "A6000", 2),
    ("Llama-3.1-8B", "H200", 1),
]
BATCHES = [1, 2, 8, 32, 128]
CONTEXTS = [0, 100, 1000, 4000]


def test_implements_the_protocol() -> None:
    p: PerfModel = perf()
    assert p.kv_capacity_tokens % p.block_size == 0
    assert p.max_num_batched_tokens >= 2048 and p.max_num_seqs >= 1


def test_decode_step_never_beats_reading_the_weights() -> None:
    # CodeLlama-7b: 13.48 GB of fp16 weights over 2.039 TB/s is 6.6 ms, whatever the batch
    p = perf()
    floor = 6.738e9 * 2 / 2.039e12
    for b in BATCHES:
        for ctx in CONTEXTS:
            assert p.step_time_s([], [SeqWork(1, ctx)] * b) > floor


def test_prefill_never_beats_peak_flops() -> None:
    # 2 FLOPs per weight per token (6.48e9 weights in the blocks) at 312 TFLOP/s, attention aside
    p = perf()
    for n in (16, 512, 2048, 8192):
        assert p.step_time_s([SeqWork(n, 0)], []) > 2 * 6.476e9 * n / 312e12


@pytest.mark.parametrize("model,gpu,tp", SETUPS)
def test_step_time_at_least_roofline(model: str, gpu: str, tp: int) -> None:
    p = perf(model, gpu, tp)
    for b in BATCHES:
        for ctx in CONTEXTS:
            decode = [SeqWork(1, ctx)] * b
            prefill = [SeqWork(min(ctx + 1, 2048), 0)]
            for pre, dec in ((prefill, []), ([], decode), (prefill, decode)):
                c = p.cost(pre, dec)
                t = p.step_time_s(pre, dec)
                assert t >= p.roofline_s(pre, dec) > 0
                assert t >= c.flops / p.gpu.peak_flops and t >= c.bytes / p.gpu.bandwidth_bytes_s


@pytest.mark.parametrize("model,gpu,tp", SETUPS)
def test_monotonic_in_batch_context_and_prompt(model: str, gpu: str, tp: int) -> None:
    p = perf(model, gpu, tp)
    for ctx in CONTEXTS:
        times = [p.step_time_s([], [SeqWork(1, ctx)] * b) for b in BATCHES]
        assert times == sorted(times) and times[0] < times[-1]
    for b in BATCHES:
        times = [p.step_time_s([], [SeqWork(1, c)] * b) for c in CONTEXTS]
        assert times == sorted(times) and times[0] < times[-1]
    times = [p.step_time_s([SeqWork(n, 0)], []) for n in (1, 64, 512, 2048, 8192)]
    assert times == sorted(times) and times[0] < times[-1]


def test_prefill_is_compute_bound_and_decode_memory_bound() -> None:
    p = perf()
    pre = p.cost([SeqWork(2048, 0)], [])
    dec = p.cost([], [SeqWork(1, 1000)] * 8)
    assert pre.compute_s > 5 * pre.memory_s
    assert dec.memory_s > 5 * dec.compute_s


def test_long_prompt_attention_is_quadratic() -> None:
    p = perf()
    c1, c2 = p.cost([SeqWork(4096, 0)], []), p.cost([SeqWork(8192, 0)], [])
    assert c2.flops > 2.05 * c1.flops  # more than linear: attention over the prompt grows as n^2


def test_moe_reads_only_routed_experts() -> None:
    p = perf("Mixtral-8x7B", "A100-80GB", 2)
    one = p.cost([], [SeqWork(1, 0)])
    many = p.cost([], [SeqWork(1, 0)] * 64)
    arch = p.arch
    assert one.bytes < 0.4 * arch.weight_bytes / 2  # 2 of 8 experts per layer, per GPU
    assert many.bytes == pytest.approx(arch.weight_bytes / 2, rel=0.03)  # a batch of 64 touches all 8
    assert p.step_time_s([], [SeqWork(1, 0)]) > one.bytes / p.gpu.bandwidth_bytes_s


def test_kv_capacity_from_memory_left() -> None:
    # vLLM 0.4 on CodeLlama-7b: 0.9 x total, less 13.48 GB of weights, the profiling step's activations (16384
    # tokens x 2 bytes x (4 x 4096 + 4 x 11008)), the sampler (256 rows x 32016 logits x 24 bytes), 1.5 GiB
    # outside PyTorch; CUDA graphs are captured after the KV cache, outside the budget
    p = perf(engine="vllm-0.4")
    m = p.memory
    assert m.activation_peak == 16384 * 2 * (4 * 4096 + 4 * 11008)
    assert m.sampler == 256 * 32016 * 24 and m.non_torch == 1.5 * 2**30 and not m.cuda_graph_in_budget
    free = 0.9 * p.gpu.memory_bytes - 6.738e9 * 2 - m.activation_peak - m.sampler - m.non_torch
    assert m.kv_cache == pytest.approx(free, rel=1e-3)
    assert p.kv_capacity_tokens == pytest.approx(free / (512 * 1024), abs=16)
    assert 100_000 < p.kv_capacity_tokens < 125_000


def test_v1_subtracts_cuda_graphs_and_steps_in_chunks() -> None:
    p = perf(engine="vllm")
    m = p.memory
    assert p.chunked_prefill and p.max_num_batched_tokens == 2048  # A100: vLLM keeps 2048-token steps
    assert m.cuda_graph_in_budget and m.cuda_graph > 0
    assert m.kv_cache == pytest.approx(m.budget - m.weights - m.activation_peak - m.sampler - m.non_torch
                                       - m.cuda_graph)
    h = perf(gpu="H100", engine="vllm")  # >= 70 GiB and not an A100: 8192-token steps, 1024 sequences
    assert h.max_num_batched_tokens == 8192 and h.max_num_seqs == 1024


def test_sglang_static_fraction_holds_weights_and_kv_only() -> None:
    p = perf("Llama-3.1-8B", "H100", engine="sglang")
    m = p.memory
    assert not m.activations_in_budget and m.activation_peak > 0
    assert m.kv_cache == pytest.approx(0.88 * p.gpu.memory_bytes - m.weights)
    assert p.chunked_prefill and p.block_size == 1


def test_long_context_profiling_step_costs_kv() -> None:
    # vLLM 0.4 profiles a step as long as the context (no chunked prefill); 0.6 chunks above 32k
    old, new = perf("Llama-3.1-8B", engine="vllm-0.4"), perf("Llama-3.1-8B", engine="vllm-0.6")
    assert old.max_num_batched_tokens == 131072 and not old.chunked_prefill
    assert new.max_num_batched_tokens == 512 and new.chunked_prefill
    assert old.memory.activation_peak > 15e9 > 0.1e9 > new.memory.activation_peak
    assert old.kv_capacity_tokens < 0.8 * new.kv_capacity_tokens
    assert not perf("CodeLlama-7b", engine="vllm-0.6").chunked_prefill  # 16384 tokens: not long


def test_a_declared_sliding_window_keeps_vllm_v0_from_chunking() -> None:
    # vLLM V0 chunks long contexts only when ModelConfig.get_sliding_window() is None; Phi-3-mini-128k declares
    # 262144 (longer than its context), so vLLM 0.6 still profiles one 131072-token step
    phi = perf("Phi-3-mini-128k", engine="vllm-0.6")
    assert phi.arch.declares_sliding_window and phi.arch.sliding_window is None
    assert not phi.chunked_prefill and phi.max_num_batched_tokens == 131072
    assert phi.kv_capacity_tokens == perf("Phi-3-mini-128k", engine="vllm-0.4").kv_capacity_tokens
    assert perf("Phi-3-mini-128k", engine="vllm").chunked_prefill  # V1 always chunks
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "max_position_embeddings": 131072, "sliding_window": 131072, "use_sliding_window": False}
    qwen = RooflinePerf(parse_hf_config(cfg, name="qwen"), find_gpu("A100-80GB"), find_engine("vllm-0.6"))
    assert not qwen.arch.declares_sliding_window and qwen.chunked_prefill  # use_sliding_window: false


def test_v0_prefill_efficiency_is_scaled_on_hopper_only(tmp_path) -> None:
    # vLLM V0 prefills with FlashAttention-2, written for Ampere (35 % of an H100's peak, 50-73 % of an A100's):
    # its A100-fitted compute efficiency is scaled on Hopper GPUs, by one factor both V0 profiles share. V1
    # (FlashAttention-3 on Hopper, fitted on an H100 NVL), SGLang and TGI keep theirs everywhere.
    assert {g for g in list_gpus() if find_gpu(g).arch == "hopper"} == {"H100", "H100-PCIe", "H200", "H100-NVL"}
    factors = set()
    for name in list_engines():
        e = find_engine(name)
        for g in list_gpus():
            gpu = find_gpu(g)
            ratio = e.compute_efficiency_on(gpu) / e.compute_efficiency
            if name in ("vllm-0.4", "vllm-0.6") and gpu.arch == "hopper":
                factors.add(ratio)
            else:
                assert ratio == 1.0, (name, g)
    (factor,) = factors
    assert 0.5 < factor < 0.95
    # the step model uses it: a compute-bound prefill is slower than the peak-FLOPs ratio says, by the factor
    a100 = perf("Codestral-22B", "A100-80GB", engine="vllm-0.6")
    nvl = perf("Codestral-22B", "H100-NVL", engine="vllm-0.6")
    ratio = a100.cost([SeqWork(4000, 0)], []).compute_s / nvl.cost([SeqWork(4000, 0)], []).compute_s
    assert ratio == pytest.approx(835 / 312 * factor)
    assert nvl.describe()["compute_efficiency"] == pytest.approx(0.56 * factor)
    v1 = perf("Codestral-22B", "H100-NVL", engine="vllm")
    assert v1.compute_efficiency == find_engine("vllm").compute_efficiency
    # a GPU of one's own is scaled when its file names the architecture
    (tmp_path / "mine.yaml").write_text("memory_gb: 96\nbandwidth_gb_s: 4000\npeak_tflops: 900\narch: Hopper\n")
    mine = build_perf_model(model="CodeLlama-7b", model_config=None, gpu=str(tmp_path / "mine.yaml"),
                            engine="vllm-0.6")
    assert isinstance(mine, RooflinePerf) and mine.compute_efficiency == pytest.approx(0.56 * factor)


def test_tensor_parallel_splits_weights_and_kv() -> None:
    one, two = perf("Llama-2-13b", tp=1), perf("Llama-2-13b", tp=2)
    assert two.weight_bytes_per_gpu == pytest.approx(one.weight_bytes_per_gpu / 2)
    assert two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu // 2
    assert two.kv_capacity_tokens > 2 * one.kv_capacity_tokens  # twice the memory, weights paid once
    dec = [SeqWork(1, 1000)] * 16
    t1, t2 = one.step_time_s([], dec), two.step_time_s([], dec)
    assert t1 / 2 < t2 < t1  # faster, but overheads and all-reduces do not split
    assert two.cost([], dec).comm_s > 0 == one.cost([], dec).comm_s


def test_kv_heads_replicate_when_fewer_than_gpus() -> None:
    # Llama-2-70b has 8 KV heads: at tp 8 each GPU holds one, beyond that they are copied
    p = perf("Llama-2-70b", "H100", 8)
    assert p.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_describe_is_plain_data() -> None:
    d = perf().describe()
    json.dumps(d)
    assert d["model"] == "CodeLlama-7b" and d["gpu"] == "A100-80GB" and d["tp"] == 1 and d["engine"] == "vllm"
    assert d["kv_bytes_per_token"] == 524288 and d["kv_capacity_tokens"] == perf().kv_capacity_tokens
    assert math.isclose(d["weight_gb"], 13.477, rel_tol=1e-3)
    assert d["engine_profile"]["compute_efficiency"] == pytest.approx(find_engine("vllm").compute_efficiency)
    assert d["memory_plan_gb_per_gpu"]["kv_cache"] == pytest.approx(perf().memory.kv_cache / 1e9, abs=1e-3)


def test_model_config_path(tmp_path) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "torch_dtype": "float16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = build_perf_model(model="my/llama", model_config=path, gpu="A100")
    q = perf("Llama-2-7b")
    assert p.kv_capacity_tokens == q.kv_capacity_tokens
    assert p.step_time_s([], [SeqWork(1, 10)]) == pytest.approx(q.step_time_s([], [SeqWork(1, 10)]))


@pytest.mark.parametrize(
    "kwargs,names",
    [
        ({"model": "nonesuch-7b", "gpu": "A100"}, ["CodeLlama-7b", "OPT-1.3B"]),
        ({"model": "CodeLlama-7b", "gpu": "TPU-v5"}, ["A100-80GB", "L4", "H200"]),
        ({"model": "CodeLlama-7b", "gpu": "A100", "engine": "trt-llm"}, ["vllm", "tgi", "sglang", "vllm-0.4"]),
        ({"model": None, "gpu": "A100"}, ["CodeLlama-7b"]),
    ],
)
def test_unknown_names_are_usage_errors_listing_known(kwargs: dict, names: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        build_perf_model(model_config=None, **kwargs)
    msg = err.value.message
    assert all(n in msg for n in names) and "\n" not in msg


def test_model_that_does_not_fit_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="does not fit on 1 x A100-80GB"):
        perf("Llama-2-70b")
    assert perf("Llama-2-70b", tp=4).kv_capacity_tokens > 0


def test_tp_must_divide_heads() -> None:
    with pytest.raises(UsageError, match="40 attention heads"):
        perf("Llama-2-13b", tp=3)


def test_listings() -> None:
    assert "CodeLlama-7b" in list_models() and "H100" in list_gpus() and "vllm" in list_engines()


def test_smaller_gpu_is_slower() -> None:
    dec = [SeqWork(1, 500)] * 4
    assert (
        perf(gpu="L4").step_time_s([], dec)
        > perf(gpu="A100").step_time_s([], dec)
        > perf(gpu="H200").step_time_s([], dec)
    )
