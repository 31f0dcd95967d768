"""Model architectures: the presets shipped in ``data/models.yaml`` and any Hugging Face ``config.json``.

Both go through one parser, :func:`parse_hf_config`, which reads llama / mistral / mixtral / qwen2 / phi3 /
gemma / bloom / opt / gpt-neox / gpt2-style keys into an :class:`Architecture`. From the architecture come
the numbers the roofline needs: parameters, weight bytes, KV bytes per token and FLOPs per token.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cardgen.errors import UsageError
from cardgen.sim.vision import VisionEncoder, parse_vision_config

# Model types whose MLP is gated (gate and up projections, SwiGLU / GeGLU): three matrices instead of two.
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma", "gemma2",
          "gemma3_text", "olmo", "olmo2", "internlm2", "deepseek", "yi", "granite", "cohere", "exaone"}
_NOT_GATED = {"bloom", "opt", "gpt_neox", "gpt2", "gptj", "gpt_bigcode", "falcon", "phi", "starcoder2", "mpt"}
# Model types with biases on every linear layer and LayerNorm (weight and bias) instead of RMSNorm.
_BIASED = {"bloom", "opt", "gpt_neox", "gpt2", "gptj", "gpt_bigcode", "phi", "starcoder2"}
# Model types whose config default ties the output projection to the input embedding.
_TIED_BY_DEFAULT = {"bloom", "opt", "gpt2", "gptj", "gpt_bigcode", "gemma", "gemma2", "gemma3_text", "falcon",
                    "starcoder2", "mpt"}
# Bytes per weight when serving, by torch_dtype. float32 checkpoints are served in 16 bits (vLLM's "auto").
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 2, "float": 2, "half": 2, "fp16": 2, "bf16": 2}


@dataclass(frozen=True, slots=True)
class Architecture:
    """A decoder-only transformer, as far as its cost is concerned. Counts are per model (not per GPU)."""

    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # MLP width (of one expert for MoE)
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool
    biases: bool  # biases on the linear layers and LayerNorm weights+biases (bloom, opt, gpt-neox, ...)
    qkv_bias: bool  # biases on the q/k/v projections only (qwen2)
    learned_positions: int  # rows of a learned position embedding (opt, gpt2); 0 for rotary/ALiBi
    experts: int  # 1 for a dense MLP
    experts_per_token: int
    max_model_len: int
    sliding_window: int | None
    weight_bits: int  # bits per weight of the linear layers (16, or 8/4 for a quantized checkpoint)
    dtype_bytes: int = 2  # activations, KV cache and non-quantized weights
    hf_id: str | None = None
    # The config declares a sliding window (``sliding_window`` set, ``use_sliding_window`` not false), even one
    # longer than the context (Phi-3-mini-128k's 262144) that ``sliding_window`` above drops: vLLM V0 reads the
    # declaration, not its effect, when it picks its defaults.
    declares_sliding_window: bool = False
    # its vision encoder (a vision-language model's ``vision_config``; None: text only, modelled with
    # cardgen.sim.vision.DEFAULT_VISION where a request carries images)
    vision: VisionEncoder | None = None

    # ---- parameters -------------------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Parameters of one layer's attention (q, k, v, o projections and their biases)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = self.hidden * (q + 2 * kv) + q * self.hidden
        if self.biases:
            n += q + 2 * kv + self.hidden
        elif self.qkv_bias:
            n += q + 2 * kv
        return n

    @property
    def expert_params(self) -> int:
        """Parameters of one MLP (one expert for MoE)."""
        mats = 3 if self.gated_mlp else 2
        n = mats * self.hidden * self.intermediate
        if self.biases:
            n += (mats - 1) * self.intermediate + self.hidden
        return n

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden * (2 if self.biases else 1)

    @property
    def layer_params(self) -> int:
        """All parameters of one transformer block (every expert and the router for MoE)."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return self.attention_params + self.experts * self.expert_params + router + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Token (and learned position) embeddings."""
        return self.vocab * self.hidden + self.learned_positions * self.hidden

    @property
    def lm_head_params(self) -> int:
        """The output projection to the vocabulary (shares storage with the embedding when tied)."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total stored parameters (tied embeddings counted once)."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        final_norm = self.hidden * (2 if self.biases else 1)
        return self.layers * self.layer_params + self.embedding_params + head + final_norm

    @property
    def active_layer_params(self) -> int:
        """Parameters of one block that one token uses (``experts_per_token`` experts for MoE)."""
        router = self.hidden * self.experts if self.experts > 1 else 0
        return (self.attention_params + self.experts_per_token * self.expert_params + router
                + self.norm_params_per_layer)

    @property
    def active_params(self) -> int:
        """Parameters one token touches, output projection included (equals :attr:`params` for a dense
        model with untied embeddings, up to the embedding lookup)."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.layers * self.active_layer_params + self.embedding_params + head

    # ---- bytes ------------------------------------------------------------------------------------------
    @property
    def linear_weight_bytes_per_param(self) -> float:
        return self.weight_bits / 8

    @property
    def expert_bytes(self) -> float:
        """Bytes of one expert's MLP weights in one layer."""
        return self.expert_params * self.linear_weight_bytes_per_param

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights: linear layers at ``weight_bits``, embeddings and norms at 16 bits."""
        linear = self.layers * (self.attention_params + self.experts * self.expert_params)
        other = self.params - linear
        return linear * self.linear_weight_bytes_per_param + other * self.dtype_bytes

    @property
    def dense_layer_bytes(self) -> float:
        """Bytes of one block that every token reads: attention, router and norms (not the experts)."""
        return self.layer_bytes - self.experts * self.expert_bytes

    @property
    def layer_bytes(self) -> float:
        w = self.linear_weight_bytes_per_param
        return (self.attention_params + self.experts * self.expert_params) * w + (
            self.layer_params - self.attention_params - self.experts * self.expert_params) * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token: 2 (K and V) x layers x KV heads x head dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    # ---- FLOPs ------------------------------------------------------------------------------------------
    @property
    def linear_flops_per_token(self) -> int:
        """Matrix-multiply FLOPs of one token through every block (2 per active weight), output head excluded."""
        return 2 * self.layers * (self.attention_params + self.experts_per_token * self.expert_params
                                  + (self.hidden * self.experts if self.experts > 1 else 0))

    @property
    def lm_head_flops(self) -> int:
        """FLOPs of the output projection for one token (only sampled positions need it)."""
        return 2 * self.lm_head_params

    def attention_flops(self, new_tokens: int, context_tokens: int) -> float:
        """FLOPs of QK^T and PV for ``new_tokens`` attending to ``context_tokens`` cached ones and to each
        other causally (4 x layers x heads x head_dim per (query, key) pair; a sliding window caps the keys)."""
        n, c = new_tokens, context_tokens
        pairs = n * c + n * (n + 1) / 2
        if self.sliding_window:
            pairs = min(pairs, n * self.sliding_window)
        return 4.0 * self.layers * self.heads * self.head_dim * pairs

    def flops_per_token(self, context_tokens: int = 0) -> float:
        """FLOPs to compute one token that attends to ``context_tokens`` earlier ones, logits included:
        about 2 x active parameters plus the attention term that grows with context."""
        return self.linear_flops_per_token + self.lm_head_flops + self.attention_flops(1, context_tokens)

    def summary(self) -> dict[str, object]:
        """Plain data for ``describe()`` and the card."""
        d: dict[str, object] = asdict(self)
        if self.vision is None:  # a text model's description as it was before vision encoders were modelled
            d.pop("vision")
        d.update(params=self.params, active_params=self.active_params, weight_bytes=self.weight_bytes,
                 kv_bytes_per_token=self.kv_bytes_per_token)
        return d


# ---- parsing ----------------------------------------------------------------------------------------------
def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def _int(cfg: dict[str, Any], what: str, *keys: str, default: int | None = None, source: str) -> int:
    v = _first(cfg, *keys)
    if v is None:
        if default is not None:
            return default
        raise UsageError(f"cannot read model config {source}: no {what} (expected one of: {', '.join(keys)})")
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0 or v != int(v):
        raise UsageError(f"cannot read model config {source}: {what} is {v!r}, not a positive whole number")
    return int(v)


def _weight_bits(cfg: dict[str, Any], source: str) -> int:
    q = cfg.get("quantization_config")
    if not q:
        return 16
    if not isinstance(q, dict):
        raise UsageError(f"cannot read model config {source}: quantization_config is not a mapping")
    method = str(q.get("quant_method", "")).lower()
    if "fp8" in method:
        return 8
    bits = q.get("bits") or q.get("w_bit") or q.get("weight_bits")
    if bits is None and q.get("load_in_4bit"):
        bits = 4
    if bits is None and q.get("load_in_8bit"):
        bits = 8
    if bits is None:
        raise UsageError(f"cannot read model config {source}: quantization {method or '?'} without a bit width")
    return int(bits)


def parse_hf_config(cfg: dict[str, Any], *, name: str, hf_id: str | None = None) -> Architecture:
    """Read a Hugging Face ``config.json`` (already parsed) into an :class:`Architecture`.

    Raises :class:`UsageError` naming the missing or bad key when the config cannot be read.
    """
    source = name
    if not isinstance(cfg, dict):
        raise UsageError(f"cannot read model config {source}: expected a JSON object, got {type(cfg).__name__}")
    vision = parse_vision_config(cfg.get("vision_config"), name=name, outer=cfg)
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers: the language model is what we serve
        outer = cfg
        cfg = {**cfg["text_config"]}
        cfg.setdefault("torch_dtype", outer.get("torch_dtype"))
    model_type = str(cfg.get("model_type") or "").lower()
    layers = _int(cfg, "layer count", "num_hidden_layers", "n_layer", "num_layers", "n_layers", source=source)
    hidden = _int(cfg, "hidden size", "hidden_size", "n_embd", "n_embed", "d_model", "dim", source=source)
    heads = _int(cfg, "attention head count", "num_attention_heads", "n_head", "num_heads", "n_heads",
                 source=source)
    if cfg.get("multi_query") and _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") is None:
        kv_heads = 1
    else:
        kv_heads = _int(cfg, "KV head count", "num_key_value_heads", "num_kv_heads", "n_head_kv",
                        "multi_query_group_num", default=heads, source=source)
    head_dim = _int(cfg, "head dim", "head_dim", default=max(1, hidden // heads), source=source)
    if hidden % heads and _first(cfg, "head_dim") is None:
        raise UsageError(f"cannot read model config {source}: hidden size {hidden} is not a multiple of "
                         f"{heads} heads and there is no head_dim")
    if heads % kv_heads:
        raise UsageError(f"cannot read model config {source}: {heads} heads cannot share {kv_heads} KV heads")
    experts = _int(cfg, "expert count", "num_local_experts", "num_experts", "moe_num_experts", default=1,
                   source=source)
    experts_per_token = _int(cfg, "experts per token", "num_experts_per_tok", "moe_top_k", default=1,
                             source=source) if experts > 1 else 1
    if experts > 1:
        intermediate = _int(cfg, "MLP width", "moe_intermediate_size", "intermediate_size", "ffn_dim",
                            source=source)
    else:
        intermediate = _int(cfg, "MLP width", "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size",
                            default=4 * hidden, source=source)
    vocab = _int(cfg, "vocabulary size", "vocab_size", "padded_vocab_size", source=source)
    if model_type in _GATED:
        gated = True
    elif model_type in _NOT_GATED:
        gated = False
    else:
        act = str(_first(cfg, "hidden_act", "activation_function") or "").lower()
        gated = act in ("silu", "swiglu", "swish")
    biases = model_type in _BIASED or (bool(cfg.get("bias")) and model_type not in _GATED)
    qkv_bias = bool(cfg.get("attention_bias")) or model_type in ("qwen2", "qwen2_moe")
    tied = cfg.get("tie_word_embeddings")
    tied = (model_type in _TIED_BY_DEFAULT) if tied is None else bool(tied)
    learned = 0
    if model_type == "opt":
        learned = _int(cfg, "max positions", "max_position_embeddings", default=2048, source=source) + 2
    elif model_type in ("gpt2", "gpt_bigcode"):
        learned = _int(cfg, "max positions", "n_positions", "max_position_embeddings", default=1024,
                       source=source)
    max_len = _int(cfg, "context length", "max_position_embeddings", "n_positions", "seq_length",
                   "max_sequence_length", "model_max_length", default=2048, source=source)
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None
    declares_window = window is not None
    window = int(window) if isinstance(window, int | float) and window and window < max_len else None
    dtype = str(_first(cfg, "torch_dtype", "dtype") or "float16").lower().removeprefix("torch.")
    if dtype not in _DTYPE_BYTES:
        raise UsageError(f"cannot read model config {source}: torch_dtype {dtype!r} is not a 16/32-bit float")
    return Architecture(
        name=name, model_type=model_type or "unknown", layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate, vocab=vocab, tied_embeddings=tied,
        gated_mlp=gated, biases=biases, qkv_bias=qkv_bias, learned_positions=learned, experts=experts,
        experts_per_token=experts_per_token, max_model_len=max_len, sliding_window=window,
        weight_bits=_weight_bits(cfg, source), dtype_bytes=_DTYPE_BYTES[dtype], hf_id=hf_id,
        declares_sliding_window=declares_window,
        vision=vision,
    )


def read_user_file(path: Path, what: str) -> str:
    """The text of a file the user named (``what``: what the messages call it, e.g. "model config"); a one-line
    :class:`UsageError` when it is missing or cannot be read as UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {path}: {exc}") from None


def load_model_config(path: Path, *, name: str | None = None) -> Architecture:
    """Read a Hugging Face ``config.json`` file (``--model-config``)."""
    path = Path(path)
    text = read_user_file(path, "model config")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"model config {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    label = name or (str(cfg.get("_name_or_path") or "") if isinstance(cfg, dict) else "")
    return parse_hf_config(cfg, name=label or path.parent.name or path.stem, hf_id=name)


# ---- presets ----------------------------------------------------------------------------------------------
@cache
def read_data(filename: str) -> dict[str, Any]:
    """One YAML file of ``cardgen/sim/data`` (models, GPUs, engine profiles), parsed once."""
    text = resources.files("cardgen.sim").joinpath("data", filename).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise RuntimeError(f"cardgen/sim/data/{filename} is not a mapping")
    return data


def name_key(name: str) -> str:
    """How names are compared: lower case, without an org prefix (``meta-llama/Llama-2-7b-hf`` ->
    ``llama-2-7b-hf``)."""
    return name.strip().rstrip("/").rsplit("/", 1)[-1].strip().lower()


_SUFFIXES = ("-hf", "-instruct", "-chat", "-it", "-base")


def resolve(name: str, entries: dict[str, Any]) -> str | None:
    """The entry of ``entries`` (a data file's mapping) that ``name`` means, or None.

    Matches the entry name, its ``hf_id`` and ``aliases``; failing that, drops variant suffixes
    (``-hf``, ``-instruct``, ``-chat``, ...) one at a time and tries again."""
    keys: dict[str, str] = {}
    for entry, spec in entries.items():
        spec = spec or {}
        for n in [entry, spec.get("hf_id"), *(spec.get("aliases") or [])]:
            if n:
                keys.setdefault(name_key(str(n)), entry)
    key = name_key(name)
    while key:
        if key in keys:
            return keys[key]
        for suffix in _SUFFIXES:
            if key.endswith(suffix):
                key = key[: -len(suffix)]
                break
        else:
            return None
    return None


def list_models() -> list[str]:
    """Names of the shipped model presets."""
    return list(read_data("models.yaml"))


def find_model(name: str) -> Architecture:
    """The preset ``name`` means (case-insensitive, org prefix optional). Raises :class:`UsageError` listing
    the known names when there is none."""
    models = read_data("models.yaml")
    entry = resolve(name, models)
    if entry is None:
        raise UsageError(f"unknown model {name!r}: known models are {', '.join(list_models())} "
                         "(or pass a Hugging Face config.json with --model-config)")
    spec = models[entry]
    return parse_hf_config(dict(spec["config"]), name=entry, hf_id=spec.get("hf_id"))
