"""The physical performance model: a model architecture on a GPU (times ``tp``) under an engine profile.

One engine step computes some prompt chunks and one token for each decoding sequence. It takes

    max(compute time, memory time) + all-reduce time + step overhead + per-sequence overhead x sequences

- compute time: FLOPs (2 per active weight per token, attention over the context, logits for the sampled
  positions) / (tp x peak x compute efficiency). Long prefills are bound here.
- memory time: bytes read per GPU (the weights once per step, only the experts some token picked for MoE;
  the resident KV cache of every sequence in the step; the new KV written) / (bandwidth x bandwidth
  efficiency). Decode is bound here.
- all-reduce time: two all-reduces of the step's activations per layer when ``tp`` > 1.

KV capacity is what the engine's memory budget leaves after the weights, the activation peak of its largest
step and a runtime reserve, in whole blocks. The engine constants live in ``data/engines.yaml``; the
hardware in ``data/gpus.yaml``; the architecture in ``data/models.yaml`` or any ``config.json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from cardgen.errors import UsageError
from cardgen.sim.catalog import Architecture, find_model, list_models, load_model_config, read_data, resolve
from cardgen.sim.hardware import GIB, GPU, find_gpu, list_gpus
from cardgen.sim.perf import PerfModel, SeqWork

__all__ = ["EngineProfile", "RooflinePerf", "StepCost", "build_perf_model", "find_engine", "list_engines",
           "list_gpus", "list_models"]


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """How close an engine gets to the roofline and what else it costs (see ``data/engines.yaml``)."""

    name: str
    description: str
    calibrated_on: str
    compute_efficiency: float
    bandwidth_efficiency: float
    step_overhead_s: float
    per_seq_overhead_s: float
    runtime_reserve_bytes: float
    gpu_memory_utilization: float
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int | None  # None: max(max_model_len, 2048)
    max_model_len: int | None  # cap on the served context length

    def describe(self) -> dict[str, object]:
        return asdict(self)


def list_engines() -> list[str]:
    """Names of the engine profiles."""
    return list(read_data("engines.yaml"))


def find_engine(name: str) -> EngineProfile:
    """The engine profile ``name`` (case-insensitive). Raises :class:`UsageError` listing the known ones."""
    engines = read_data("engines.yaml")
    entry = resolve(name, engines)
    if entry is None:
        raise UsageError(f"unknown engine profile {name!r}: known profiles are {', '.join(list_engines())}")
    e = engines[entry]
    batched = e.get("max_num_batched_tokens", "auto")
    return EngineProfile(
        name=entry,
        description=e.get("description", entry),
        calibrated_on=e.get("calibrated_on", ""),
        compute_efficiency=float(e["compute_efficiency"]),
        bandwidth_efficiency=float(e["bandwidth_efficiency"]),
        step_overhead_s=float(e["step_overhead_ms"]) / 1e3,
        per_seq_overhead_s=float(e["per_seq_overhead_ms"]) / 1e3,
        runtime_reserve_bytes=float(e["runtime_reserve_gib"]) * GIB,
        gpu_memory_utilization=float(e["gpu_memory_utilization"]),
        block_size=int(e["block_size"]),
        max_num_seqs=int(e["max_num_seqs"]),
        max_num_batched_tokens=None if batched in (None, "auto") else int(batched),
        max_model_len=None if e.get("max_model_len") is None else int(e["max_model_len"]),
    )


@dataclass(frozen=True, slots=True)
class StepCost:
    """The parts of one step's time, in seconds, and the work behind them (per GPU)."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s


class RooflinePerf:
    """:class:`~cardgen.sim.perf.PerfModel` of ``arch`` on ``tp`` x ``gpu`` under ``engine``."""

    def __init__(self, arch: Architecture, gpu: GPU, engine: EngineProfile, *, tp: int = 1) -> None:
        if tp < 1:
            raise UsageError(f"tensor parallel size must be at least 1, not {tp}")
        if arch.heads % tp:
            raise UsageError(f"{arch.name} has {arch.heads} attention heads, which {tp} GPUs cannot share "
                             "evenly: choose a tensor parallel size that divides it")
        self.arch, self.gpu, self.engine, self.tp = arch, gpu, engine, tp
        self.block_size = engine.block_size
        self.max_num_seqs = engine.max_num_seqs
        self.weight_bytes_per_gpu = arch.weight_bytes / tp
        self.kv_bytes_per_token_per_gpu = (2 * arch.layers * math.ceil(arch.kv_heads / tp) * arch.head_dim
                                           * arch.dtype_bytes)
        self.memory_budget_bytes = engine.gpu_memory_utilization * gpu.memory_bytes
        # The served context: the model's, capped by the profile, halved (as one would pass --max-model-len)
        # until the KV cache holds one whole sequence; the prefill budget follows it unless the profile fixes it.
        max_len = min(arch.max_model_len, engine.max_model_len or arch.max_model_len)
        while True:
            self.max_model_len = max_len
            self.max_num_batched_tokens = engine.max_num_batched_tokens or max(max_len, 2048)
            self.activation_bytes_per_gpu = self._activation_peak_bytes()
            self.kv_cache_bytes_per_gpu = (self.memory_budget_bytes - self.weight_bytes_per_gpu
                                           - self.activation_bytes_per_gpu - engine.runtime_reserve_bytes)
            blocks = max(0, math.floor(self.kv_cache_bytes_per_gpu / (self.kv_bytes_per_token_per_gpu
                                                                       * self.block_size)))
            self.kv_capacity_tokens = blocks * self.block_size
            if self.kv_capacity_tokens >= max_len or max_len <= 2048:
                break
            max_len = max(2048, max_len // 2)
        if self.kv_capacity_tokens < self.block_size:
            need = (self.weight_bytes_per_gpu + self.activation_bytes_per_gpu + engine.runtime_reserve_bytes) / 1e9
            raise UsageError(
                f"{arch.name} does not fit on {tp} x {gpu.name}: it needs {need:.1f} GB per GPU for weights and "
                f"activations, the engine may use {self.memory_budget_bytes / 1e9:.1f} GB; use more GPUs (--tp) "
                "or a larger GPU")
        self.max_model_len = min(self.max_model_len, self.kv_capacity_tokens)
        self.gpu_memory_utilization = engine.gpu_memory_utilization
        self.kv_cache_memory_bytes = self.kv_capacity_tokens * self.kv_bytes_per_token_per_gpu  # per GPU
        # constants of the step function
        self._linear_flops = arch.linear_flops_per_token
        self._head_flops = arch.lm_head_flops
        self._attn_flops_per_pair = 4.0 * arch.layers * arch.heads * arch.head_dim
        self._window = arch.sliding_window or math.inf
        dense = arch.layers * (arch.dense_layer_bytes + (arch.expert_bytes if arch.experts == 1 else 0.0))
        self._dense_read_bytes = (dense + arch.lm_head_params * arch.dtype_bytes) / tp
        self._flop_s = gpu.peak_flops * engine.compute_efficiency
        self._byte_s = gpu.bandwidth_bytes_s * engine.bandwidth_efficiency

    def _activation_peak_bytes(self) -> float:
        """Activation memory of the largest step (``max_num_batched_tokens`` tokens), per GPU: the residual
        stream and normed input (4 x hidden per token) while the MLP's gate/up output and activation are alive
        ((matrices + 1) x width per routed expert, split over tp), plus fp32 logits and probabilities for
        ``max_num_seqs`` sequences."""
        a = self.arch
        mats = 3 if a.gated_mlp else 2
        per_token = a.dtype_bytes * (4 * a.hidden + (mats + 1) * a.intermediate * a.experts_per_token / self.tp)
        logits = self.max_num_seqs * a.vocab * 4 * 2
        return self.max_num_batched_tokens * per_token + logits

    # ---- one step -------------------------------------------------------------------------------------------
    def _weight_read_bytes(self, tokens: int) -> float:
        """Weight bytes read per GPU in a step of ``tokens`` tokens: every block (for MoE, only the experts
        some token routed to; ``tokens`` independent picks of ``experts_per_token``) and the output head.
        The embedding table is only gathered from, not streamed."""
        a = self.arch
        if a.experts == 1:
            return self._dense_read_bytes
        touched = a.experts * (1.0 - (1.0 - a.experts_per_token / a.experts) ** tokens)
        return self._dense_read_bytes + a.layers * touched * a.expert_bytes / self.tp

    def cost(self, prefill: list[SeqWork], decode: list[SeqWork]) -> StepCost:
        """What a step that computes ``prefill`` chunks and one token for each of ``decode`` costs."""
        work = [*prefill, *decode]
        if not work:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        tokens = 0
        pairs = 0.0  # (query, key) pairs of attention
        cached = 0  # KV tokens read
        window = self._window
        for w in work:
            n, c = w.new_tokens, w.context_tokens
            tokens += n
            p = n * c + n * (n + 1) / 2
            pairs += p if p < n * window else n * window
            cached += c if c < window else window
        seqs = len(work)
        a, tp = self.arch, self.tp
        flops = (tokens * self._linear_flops + seqs * self._head_flops + self._attn_flops_per_pair * pairs) / tp
        kv = self.kv_bytes_per_token_per_gpu
        nbytes = self._weight_read_bytes(tokens) + (cached + tokens) * kv
        comm = 2 * a.layers * self.gpu.allreduce_s(tokens * a.hidden * a.dtype_bytes, tp) if tp > 1 else 0.0
        e = self.engine
        return StepCost(
            flops=flops,
            bytes=nbytes,
            compute_s=flops / self._flop_s,
            memory_s=nbytes / self._byte_s,
            comm_s=comm,
            overhead_s=e.step_overhead_s + e.per_seq_overhead_s * seqs,
        )

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        """Seconds of one engine step; never below :meth:`roofline_s`."""
        return self.cost(prefill, decode).total_s

    def roofline_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        """The hardware bound of a step: its FLOPs at peak or its bytes at full bandwidth, whichever is longer."""
        c = self.cost(prefill, decode)
        return max(c.flops / self.gpu.peak_flops, c.bytes / self.gpu.bandwidth_bytes_s)

    def describe(self) -> dict[str, object]:
        """Plain data: what is modelled, with which constants, and the memory plan."""
        a, g = self.arch, self.gpu
        return {
            "kind": "roofline",
            "model": a.name,
            "hf_id": a.hf_id,
            "gpu": g.name,
            "tp": self.tp,
            "engine": self.engine.name,
            "engine_profile": self.engine.describe(),
            "gpu_spec": {
                "description": g.description,
                "peak_tflops": g.peak_flops / 1e12,
                "bandwidth_gb_s": g.bandwidth_bytes_s / 1e9,
                "memory_gib": g.memory_bytes / GIB,
                "link": g.link_name,
            },
            "architecture": a.summary(),
            "params": a.params,
            "active_params": a.active_params,
            "weight_gb": a.weight_bytes / 1e9,
            "weight_gb_per_gpu": self.weight_bytes_per_gpu / 1e9,
            "activation_reserve_gb_per_gpu": self.activation_bytes_per_gpu / 1e9,
            "runtime_reserve_gb_per_gpu": self.engine.runtime_reserve_bytes / 1e9,
            "kv_cache_gb_per_gpu": self.kv_cache_memory_bytes / 1e9,
            "kv_bytes_per_token": a.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
        }


def build_perf_model(*, model: str | None, model_config: Path | None, gpu: str, tp: int = 1,
                     engine: str = "vllm") -> PerfModel:
    """The roofline model of ``model`` (a preset name, or any name when ``model_config`` is given: a Hugging
    Face ``config.json``) on ``tp`` x ``gpu`` under the ``engine`` profile.

    Raises :class:`UsageError` for an unknown model, GPU or engine profile (the message lists the known
    names), an unreadable config, or a model that does not fit."""
    g = find_gpu(gpu)
    profile = find_engine(engine)
    if model_config is not None:
        arch = load_model_config(Path(model_config), name=model)
    elif model:
        arch = find_model(model)
    else:
        raise UsageError(f"name a model (known models are {', '.join(list_models())}) or pass --model-config")
    return RooflinePerf(arch, g, profile, tp=tp)
