"""Model presets and the Hugging Face config.json parser: sizes against the published parameter counts."""

from __future__ import annotations

import json

import pytest

from cardgen.errors import UsageError
from cardgen.sim.catalog import find_model, list_models, load_model_config, parse_hf_config
from cardgen.sim.hardware import find_gpu, list_gpus

# Parameter counts as published (model cards / safetensors metadata).
KNOWN_PARAMS = {
    "CodeLlama-7b": 6.74e9,
    "CodeLlama-13b": 13.02e9,
    "CodeLlama-34b": 33.74e9,
    "Llama-2-7b": 6.74e9,
    "Llama-2-13b": 13.02e9,
    "Llama-2-70b": 68.98e9,
    "Llama-3.1-8B": 8.03e9,
    "Llama-3.1-70B": 70.55e9,
    "Mistral-7B": 7.24e9,
    "Mixtral-8x7B": 46.70e9,
    "Qwen2.5-7B": 7.62e9,
    "Qwen2-7B": 7.62e9,
    "Mistral-Nemo-12B": 12.25e9,
    "Codestral-22B": 22.25e9,
    "Phi-3-mini": 3.82e9,
    "bloomz-1b1": 1.065e9,
    "OPT-1.3B": 1.316e9,
}


def test_every_required_preset_ships() -> None:
    assert set(KNOWN_PARAMS) <= set(list_models())


@pytest.mark.parametrize("name,params", sorted(KNOWN_PARAMS.items()))
def test_preset_parameter_count_matches_published(name: str, params: float) -> None:
    assert find_model(name).params == pytest.approx(params, rel=0.02)


def test_mixtral_active_parameters() -> None:
    # Mixtral-8x7B: 46.7B stored, 12.9B used per token (2 of 8 experts)
    arch = find_model("Mixtral-8x7B")
    assert arch.active_params == pytest.approx(12.9e9, rel=0.02)
    assert arch.linear_flops_per_token < 0.3 * 2 * arch.params


def test_kv_bytes_per_token() -> None:
    assert find_model("CodeLlama-7b").kv_bytes_per_token == 512 * 1024  # 32 layers x 32 heads x 128 x 2 x 2
    assert find_model("Llama-3.1-8B").kv_bytes_per_token == 128 * 1024  # GQA: 8 KV heads
    assert find_model("Llama-2-70b").kv_bytes_per_token == 320 * 1024  # 80 layers x 8 KV heads
    assert find_model("OPT-1.3B").kv_bytes_per_token == 196_608  # FlexGen's "cache size" per token


def test_weight_bytes_are_16_bit() -> None:
    arch = find_model("CodeLlama-7b")
    assert arch.weight_bytes == pytest.approx(2 * arch.params)
    assert arch.weight_bytes / 2**30 == pytest.approx(12.55, abs=0.01)  # vLLM logs "took 12.55 GB"


def test_flops_per_token_grows_with_context() -> None:
    arch = find_model("CodeLlama-7b")
    base = arch.flops_per_token(0)
    assert base == pytest.approx(2 * arch.params, rel=0.03)
    # attention adds 4 x layers x hidden per cached token
    assert arch.flops_per_token(4096) - base == pytest.approx(4 * 32 * 4096 * 4096, rel=0.01)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("CodeLlama-7b", "CodeLlama-7b"),
        ("codellama-7b", "CodeLlama-7b"),
        ("codellama/CodeLlama-7b-Instruct-hf", "CodeLlama-7b"),
        ("meta-llama/Llama-2-7b-hf", "Llama-2-7b"),
        ("meta-llama/Llama-2-13b-chat-hf", "Llama-2-13b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral-8x7B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("microsoft/Phi-3-mini-4k-instruct", "Phi-3-mini"),
        ("bigscience/bloomz-1b1", "bloomz-1b1"),
        ("facebook/opt-1.3b", "OPT-1.3B"),
    ],
)
def test_model_names_resolve(name: str, expected: str) -> None:
    assert find_model(name).name == expected


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(UsageError) as err:
        find_model("gpt-5-ultra")
    msg = err.value.message
    assert "gpt-5-ultra" in msg and "CodeLlama-7b" in msg and "Mixtral-8x7B" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name,expected",
    [
        ("A100", "A100-80GB"),
        ("a100-80g", "A100-80GB"),
        ("H100-SXM", "H100"),
        ("l40s", "L40S"),
        ("A100-40GB", "A100-40GB"),
    ],
)
def test_gpu_aliases(name: str, expected: str) -> None:
    assert find_gpu(name).name == expected


def test_required_gpus_and_datasheet_figures() -> None:
    assert {"A100-80GB", "A100-40GB", "A6000", "L4", "L40S", "H100", "H200"} <= set(list_gpus())
    a100 = find_gpu("A100-80GB")
    assert a100.peak_flops == 312e12 and a100.bandwidth_bytes_s == pytest.approx(2.039e12)
    assert 79 * 2**30 < a100.memory_bytes <= 80 * 2**30
    h200 = find_gpu("H200")
    assert h200.bandwidth_bytes_s == pytest.approx(4.8e12) and h200.memory_bytes > 130 * 2**30


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(UsageError, match=r"unknown GPU 'B300'.*A100-80GB.*H200"):
        find_gpu("B300")


# ---- Hugging Face config.json ------------------------------------------------------------------------------
MISTRAL_V02 = {  # mistralai/Mistral-7B-Instruct-v0.2
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0",
    "use_cache": True,
    "vocab_size": 32000,
}
PYTHIA_1B4 = {  # EleutherAI/pythia-1.4b
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
    "activation_function": "gelu_new",
}


def test_hf_config_json_file(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MISTRAL_V02))
    arch = load_model_config(path, name="mistralai/Mistral-7B-Instruct-v0.2")
    assert arch.name == "mistralai/Mistral-7B-Instruct-v0.2"
    assert arch.params == pytest.approx(7.24e9, rel=0.01)
    assert arch.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert arch.sliding_window is None and arch.max_model_len == 32768


@pytest.mark.parametrize(
    "cfg,params,kv",
    [
        (PYTHIA_1B4, 1_414_647_808, 24 * 16 * 128 * 2 * 2),
        (GPT2, 124_439_808, 12 * 12 * 64 * 2 * 2),
    ],
)
def test_hf_config_other_families(cfg: dict, params: int, kv: int) -> None:
    arch = parse_hf_config(cfg, name="x")
    assert arch.params == pytest.approx(params, rel=0.005)
    assert arch.kv_bytes_per_token == kv


def test_quantized_config_has_smaller_weights() -> None:
    awq = {**MISTRAL_V02, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    arch, full = parse_hf_config(awq, name="q"), parse_hf_config(MISTRAL_V02, name="f")
    assert arch.params == full.params
    assert (
        0.25 * full.weight_bytes < arch.weight_bytes < 0.35 * full.weight_bytes
    )  # 4-bit layers, 16-bit embeddings


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in MISTRAL_V02.items() if k != "num_hidden_layers"}), "num_hidden_layers"),
        (json.dumps({**MISTRAL_V02, "hidden_size": "big"}), "hidden size"),
        (json.dumps({**MISTRAL_V02, "num_key_value_heads": 5}), "KV heads"),
        (json.dumps({**MISTRAL_V02, "torch_dtype": "int8"}), "torch_dtype"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path, text: str, match: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        load_model_config(path)


def test_missing_config_file(tmp_path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_model_config(tmp_path / "nope.json")
