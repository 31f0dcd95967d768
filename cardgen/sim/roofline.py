"""The physical performance model: a model architecture on a GPU (times ``tp``) under an engine profile.

One engine step computes some prompt chunks and one token for each decoding sequence. It takes

    max(compute time, memory time) + all-reduce time + step overhead + per-sequence overhead x sequences

- compute time: FLOPs (2 per active weight per token, attention over the context, logits for the sampled
  positions) / (tp x peak x compute efficiency). Long prefills are bound here. The efficiency is the engine's
  on the GPU's architecture: kernels written before an architecture reach less of its peak
  (:meth:`EngineProfile.compute_efficiency_on`).
- memory time: bytes read per GPU (the weights once per step, only the experts some token picked for MoE;
  the resident KV cache of every sequence in the step; the new KV written) / (bandwidth x bandwidth
  efficiency). Decode is bound here.
- all-reduce time: two all-reduces of the step's activations per layer when ``tp`` > 1.
- LoRA (``lora_rank`` > 0): each distinct adapter of the step adds its weights to the bytes read, and each token
  of an adapted sequence its FLOPs (:mod:`cardgen.sim.lora`). Speculative decoding: a verifying sequence computes
  1 + K tokens (the scheduler says so); an EAGLE-style draft head adds K passes of one layer and the output head
  over the decoding sequences (:meth:`RooflinePerf.draft_time_s`).

KV capacity is what the engine's memory budget leaves after the weights, the activation peak of its profiling
step, the sampler, memory outside PyTorch and (vLLM >= 0.21) CUDA graphs, in whole blocks (:class:`MemoryPlan`). The engine constants live in ``data/engines.yaml``; the
hardware in ``data/gpus.yaml``; the architecture in ``data/models.yaml`` or any ``config.json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, cast

from cardgen.errors import UsageError
from cardgen.sim.catalog import Architecture, find_model, list_models, load_model_config, read_data, resolve
from cardgen.sim.hardware import GIB, GPU, find_gpu, list_gpus
from cardgen.sim.lora import lora_dims
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.vision import DEFAULT_VISION

__all__ = ["EngineProfile", "MemoryPlan", "RooflinePerf", "StepCost", "build_perf_model", "find_engine", "list_engines",
           "list_gpus", "list_models"]


CHUNKED_PREFILL = ("off", "on", "long_context")
CUDA_GRAPHS = ("in_budget", "outside_budget", "none")
LONG_CONTEXT = 32768  # vLLM 0.5.3-0.x V0 turn chunked prefill on by themselves above this served context
LARGE_GPU_BYTES = 70 * GIB  # vLLM >= 0.9 picks larger step budgets on GPUs this large (A100s excepted)
# The sampler of the profiling run, bytes per logit: the fp32 logits, probabilities and log-probabilities, the
# sorted logits of the top-k/top-p path (fp32) and their int64 sort indices: 4 + 4 + 4 + 4 + 8.
SAMPLER_BYTES_PER_LOGIT = 24


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """How close an engine gets to the roofline, what else it costs, and how it plans memory at start-up (see
    ``data/engines.yaml``)."""

    name: str
    description: str
    calibrated_on: str
    compute_efficiency: float
    bandwidth_efficiency: float
    step_overhead_s: float
    per_seq_overhead_s: float
    gpu_memory_utilization: float
    non_torch_bytes: float
    cuda_graphs: str  # in_budget | outside_budget | none
    cuda_graph_fixed_bytes: float
    cuda_graph_max_batch: int
    block_size: int
    max_num_seqs: int
    chunked_prefill: str  # off | on | long_context
    max_num_batched_tokens: int | None  # None: max(max_model_len, 2048) without chunked prefill
    chunked_batched_tokens: int
    large_gpu: dict[str, int]
    max_model_len: int | None  # cap on the served context length
    activations_in_budget: bool = True  # False: the budget holds weights and KV only (SGLang's static fraction)
    arch_compute_factor: dict[str, float] = field(default_factory=dict)  # GPU architecture -> factor on it

    def describe(self) -> dict[str, object]:
        return asdict(self)

    def prefills_in_chunks(self, arch: Architecture, served_len: int) -> bool:
        """Whether the engine prefills in chunks when serving ``served_len`` tokens of context of ``arch``.

        ``long_context`` is vLLM V0's own default (``EngineArgs``, 0.5.3 to 0.x): chunked prefill comes on for a
        served context above 32768 tokens, so that the start-up profiling step stays small, except for a model
        whose config declares a sliding window (``ModelConfig.get_sliding_window()`` is not None) of any size.
        Phi-3-mini-128k declares 262144, so vLLM profiles one step of its whole 131072-token context."""
        if self.chunked_prefill != "long_context":
            return self.chunked_prefill == "on"
        return served_len > LONG_CONTEXT and not arch.declares_sliding_window

    def for_gpu(self, gpu: GPU) -> EngineProfile:
        """The profile as the engine configures itself on ``gpu`` (``large_gpu`` overrides on large GPUs)."""
        if not self.large_gpu or gpu.memory_bytes < LARGE_GPU_BYTES or "a100" in gpu.name.lower():
            return self
        return replace(self, **cast("dict[str, Any]", self.large_gpu))  # field name -> its override

    def compute_efficiency_on(self, gpu: GPU) -> float:
        """The fraction of ``gpu``'s peak a compute-bound step reaches: ``compute_efficiency`` times the profile's
        factor for the GPU's architecture (1 without one).

        Why a factor per architecture: the datasheet peak of a new architecture is only reached by kernels
        written for it. vLLM 0.4-0.6 (V0) prefill with FlashAttention-2, which reaches 50-73 % of an A100's peak
        (arXiv 2307.08691) but 35 % of an H100's: Hopper needs wgmma and TMA, which FlashAttention-3 uses
        (arXiv 2407.08608) and vLLM took up in January 2025 (PR #12093), after 0.6. A V0 efficiency fitted on
        A100s would overstate the same engine's prefill on Hopper. The factor itself is fitted on one H100 card
        (``data/engines.yaml`` says how much of it the documented kernel figures account for)."""
        return self.compute_efficiency * self.arch_compute_factor.get(gpu.arch, 1.0)


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
    chunked = str(e.get("chunked_prefill", "off")).lower()
    chunked = {"true": "on", "false": "off"}.get(chunked, chunked)
    graphs = str(e.get("cuda_graphs", "outside_budget"))
    if chunked not in CHUNKED_PREFILL or graphs not in CUDA_GRAPHS:
        raise RuntimeError(f"engine profile {entry}: chunked_prefill must be one of {CHUNKED_PREFILL} and "
                           f"cuda_graphs one of {CUDA_GRAPHS}")
    return EngineProfile(
        name=entry,
        description=e.get("description", entry),
        calibrated_on=e.get("calibrated_on", ""),
        compute_efficiency=float(e["compute_efficiency"]),
        bandwidth_efficiency=float(e["bandwidth_efficiency"]),
        step_overhead_s=float(e["step_overhead_ms"]) / 1e3,
        per_seq_overhead_s=float(e["per_seq_overhead_ms"]) / 1e3,
        gpu_memory_utilization=float(e["gpu_memory_utilization"]),
        non_torch_bytes=float(e["non_torch_gib"]) * GIB,
        cuda_graphs=graphs,
        cuda_graph_fixed_bytes=float(e.get("cuda_graph_fixed_gib", 0.0)) * GIB,
        cuda_graph_max_batch=int(e.get("cuda_graph_max_batch", 0)),
        block_size=int(e["block_size"]),
        max_num_seqs=int(e["max_num_seqs"]),
        chunked_prefill=chunked,
        max_num_batched_tokens=None if batched in (None, "auto") else int(batched),
        chunked_batched_tokens=int(e.get("chunked_batched_tokens", 2048)),
        large_gpu={str(k): int(v) for k, v in (e.get("large_gpu") or {}).items()},
        max_model_len=None if e.get("max_model_len") is None else int(e["max_model_len"]),
        activations_in_budget=bool(e.get("activations_in_budget", True)),
        arch_compute_factor={str(k).lower(): float(v) for k, v in (e.get("arch_compute_factor") or {}).items()},
    )


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How the engine splits one GPU's memory at start-up, in bytes, as vLLM does it.

    vLLM loads the weights, then runs one profiling step (``profile_run``): a forward pass over
    ``max_num_batched_tokens`` dummy tokens spread over ``max_num_seqs`` sequences, then the sampler over one
    logit row per sequence. The KV cache gets what is left of ``gpu_memory_utilization`` x total memory after the
    weights, that step's activation peak, the sampler's buffers, the memory outside PyTorch it saw (workspaces,
    NCCL), and, from vLLM 0.21, its estimate of the CUDA graphs' memory. Earlier versions capture the graphs after
    the KV cache, on top of the budget (``cuda_graph`` is then reported but not subtracted).
    """

    total: float  # the GPU's memory as CUDA reports it
    budget: float  # gpu_memory_utilization x total
    weights: float
    activation_peak: float  # the profiling forward pass over max_num_batched_tokens tokens
    sampler: float  # the profiling run's sampler over max_num_seqs logit rows
    non_torch: float
    cuda_graph: float
    cuda_graph_in_budget: bool
    activations_in_budget: bool = True

    @property
    def kv_cache(self) -> float:
        """What the KV cache may use: the budget less every other term (CUDA graphs only when in the budget;
        activations, sampler and memory outside PyTorch only when the engine profiles them into it)."""
        graphs = self.cuda_graph if self.cuda_graph_in_budget else 0.0
        runtime = self.activation_peak + self.sampler + self.non_torch if self.activations_in_budget else 0.0
        return self.budget - self.weights - runtime - graphs

    def describe(self) -> dict[str, float | bool]:
        """The terms in GB (1e9 bytes), for run.json and the card."""
        d: dict[str, float | bool] = {k: round(v / 1e9, 4) for k, v in asdict(self).items()
                                      if isinstance(v, float)}
        d["kv_cache"] = round(self.kv_cache / 1e9, 4)
        d["cuda_graph_in_budget"] = self.cuda_graph_in_budget
        d["activations_in_budget"] = self.activations_in_budget
        return d


class StepCost(NamedTuple):
    """The parts of one step's time, in seconds, and the work behind them (per GPU). A named tuple: one is made
    per modelled step (millions in a long run), and a tuple is made several times faster than a frozen
    dataclass."""

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

    def __init__(self, arch: Architecture, gpu: GPU, engine: EngineProfile, *, tp: int = 1, lora_rank: int = 0) -> None:
        if tp < 1:
            raise UsageError(f"tensor parallel size must be at least 1, not {tp}")
        if arch.heads % tp:
            raise UsageError(f"{arch.name} has {arch.heads} attention heads, which {tp} GPUs cannot share "
                             "evenly: choose a tensor parallel size that divides it")
        engine = engine.for_gpu(gpu)
        self.arch, self.gpu, self.engine, self.tp = arch, gpu, engine, tp
        self.block_size = engine.block_size
        self.max_num_seqs = engine.max_num_seqs
        self.weight_bytes_per_gpu = arch.weight_bytes / tp
        self.kv_bytes_per_token_per_gpu = (2 * arch.layers * math.ceil(arch.kv_heads / tp) * arch.head_dim
                                           * arch.dtype_bytes)
        # The served context: the model's (capped by the profile), halved (as one would pass --max-model-len)
        # until the KV cache holds one whole sequence; the step budget, and with it the profiling run's
        # activation peak, follows it.
        max_len = min(arch.max_model_len, engine.max_model_len or arch.max_model_len)
        while True:
            self.max_model_len = max_len
            self.chunked_prefill = engine.prefills_in_chunks(arch, max_len)
            if self.chunked_prefill:
                self.max_num_batched_tokens = engine.chunked_batched_tokens
            else:
                self.max_num_batched_tokens = engine.max_num_batched_tokens or max(max_len, 2048)
            self.memory = self.memory_plan()
            blocks = max(0, math.floor(self.memory.kv_cache / (self.kv_bytes_per_token_per_gpu * self.block_size)))
            self.kv_capacity_tokens = blocks * self.block_size
            if self.kv_capacity_tokens >= max_len or max_len <= 2048:
                break
            max_len = max(2048, max_len // 2)
        m = self.memory
        self.memory_budget_bytes = m.budget
        self.activation_bytes_per_gpu = m.activation_peak + m.sampler
        self.kv_cache_bytes_per_gpu = m.kv_cache
        if self.kv_capacity_tokens < self.block_size:
            need = (m.budget - m.kv_cache) / 1e9
            raise UsageError(
                f"{arch.name} does not fit on {tp} x {gpu.name}: it needs {need:.1f} GB per GPU for weights, "
                f"activations and runtime, the engine may use {m.budget / 1e9:.1f} GB; use more GPUs (--tp) "
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
        self.compute_efficiency = engine.compute_efficiency_on(gpu)
        self._flop_s = gpu.peak_flops * self.compute_efficiency
        self._byte_s = gpu.bandwidth_bytes_s * engine.bandwidth_efficiency
        # a request's images: the model's vision encoder (else the default), compute-bound on one GPU
        self.vision = arch.vision or DEFAULT_VISION
        # LoRA: one adapter's bytes (every layer's A and B matrices, split over tp) and FLOPs per adapted token
        self.lora_rank = lora_rank
        self._lora_bytes = arch.layers * lora_rank * lora_dims(arch) * arch.dtype_bytes / tp
        self._lora_flops_per_token = 2.0 * arch.layers * lora_rank * lora_dims(arch) / tp

    def _activation_bytes_per_token(self) -> float:
        """Activation bytes one token holds at the forward pass's peak, per GPU: the residual stream and the
        normed input (4 x hidden) while the MLP's gate/up output and its activation are alive ((matrices + 1) x
        width per routed expert, split over tp)."""
        a = self.arch
        mats = 3 if a.gated_mlp else 2
        return a.dtype_bytes * (4 * a.hidden + (mats + 1) * a.intermediate * a.experts_per_token / self.tp)

    def memory_plan(self) -> MemoryPlan:
        """The start-up memory plan of one GPU for the current ``max_num_batched_tokens`` (see
        :class:`MemoryPlan`). The sampler's rows: one per profiled sequence, min(max_num_seqs, tokens)."""
        e, g = self.engine, self.gpu
        per_token = self._activation_bytes_per_token()
        rows = min(self.max_num_seqs, self.max_num_batched_tokens)
        graph_batch = min(e.cuda_graph_max_batch, self.max_num_seqs)
        graphs = 0.0 if e.cuda_graphs == "none" else graph_batch * per_token + e.cuda_graph_fixed_bytes
        return MemoryPlan(
            total=g.memory_bytes,
            budget=e.gpu_memory_utilization * g.memory_bytes,
            weights=self.weight_bytes_per_gpu,
            activation_peak=self.max_num_batched_tokens * per_token,
            sampler=float(rows * self.arch.vocab * SAMPLER_BYTES_PER_LOGIT),
            non_torch=e.non_torch_bytes,
            cuda_graph=graphs,
            cuda_graph_in_budget=e.cuda_graphs == "in_budget",
            activations_in_budget=e.activations_in_budget,
        )

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
        cached: float = 0  # KV tokens read (up to the window, math.inf without one)
        window = self._window
        for w in work:
            n, c = w.new_tokens, w.context_tokens
            tokens += n
            p = n * c + n * (n + 1) / 2
            pairs += p if p < n * window else n * window
            cached += c if c < window else window
        extra_bytes = extra_flops = 0.0
        if self.lora_rank:
            adapters = {w.adapter for w in work if w.adapter is not None}
            extra_bytes = len(adapters) * self._lora_bytes
            extra_flops = sum(w.new_tokens for w in work if w.adapter is not None) * self._lora_flops_per_token
        return self._priced(tokens, len(work), pairs, cached, extra_bytes, extra_flops)

    def _priced(self, tokens: int, seqs: int, pairs: float, cached: float, extra_bytes: float = 0.0,
                extra_flops: float = 0.0) -> StepCost:
        """A step's cost from its sums: ``tokens`` computed by ``seqs`` sequences, ``pairs`` (query, key) pairs of
        attention, ``cached`` KV tokens read, and what adapters add."""
        a, tp = self.arch, self.tp
        flops = (tokens * self._linear_flops + seqs * self._head_flops + self._attn_flops_per_pair * pairs) / tp
        kv = self.kv_bytes_per_token_per_gpu
        nbytes = self._weight_read_bytes(tokens) + (cached + tokens) * kv
        if self.lora_rank:
            nbytes += extra_bytes
            flops += extra_flops
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

    def uniform_decode_s(self, seqs: int, context: int) -> float | None:
        """Seconds of a step that decodes one token for each of ``seqs`` sequences (no adapter) holding ``context``
        tokens in all: ``step_time_s([], [SeqWork(1, c) for each c])`` to the last bit, from the two sums (every
        term :meth:`cost` adds is a whole number below 2**53, so their order does not change the sum). None with
        a sliding window (a term is cut to it) or where the sums are too large to be exact."""
        if self._window != math.inf or context + seqs >= 2**53:
            return None
        if seqs < 1:
            return 0.0
        return self._total_s(seqs, seqs, float(context + seqs), context)

    def summed_step_s(self, tokens: int, seqs: int, pairs: int, cached: int) -> float | None:
        """:meth:`step_time_s` of a step from its sums (no :class:`SeqWork` made): ``tokens`` computed by ``seqs``
        sequences, ``pairs`` (query, key) pairs of attention and ``cached`` KV tokens read, to the last bit (every
        term :meth:`cost` adds is a whole number below 2**53, so their order does not change the sums). None with
        a sliding window or adapters (a term is cut, or depends on which adapter) or where a sum is too large to
        be exact."""
        if self._window != math.inf or self.lora_rank or pairs >= 2**53 or cached + tokens >= 2**53:
            return None
        return self._total_s(tokens, seqs, float(pairs), cached)

    def _total_s(self, tokens: int, seqs: int, pairs: float, cached: int) -> float:
        """``_priced(tokens, seqs, pairs, cached).total_s`` without adapters, by the same operations in the same
        order (no StepCost made: this is once per modelled step)."""
        tp = self.tp
        flops = (tokens * self._linear_flops + seqs * self._head_flops + self._attn_flops_per_pair * pairs) / tp
        nbytes = self._weight_read_bytes(tokens) + (cached + tokens) * self.kv_bytes_per_token_per_gpu
        comm = 2 * self.arch.layers * self.gpu.allreduce_s(tokens * self.arch.hidden * self.arch.dtype_bytes, tp) \
            if tp > 1 else 0.0
        e = self.engine
        return max(flops / self._flop_s, nbytes / self._byte_s) + comm + (e.step_overhead_s + e.per_seq_overhead_s * seqs)

    def encode_time_s(self, flops: float) -> float:
        """Seconds the vision encoder takes for ``flops`` (one GPU at the profile's compute efficiency: an encoder
        of a few hundred million parameters is not split over tensor-parallel GPUs)."""
        return flops / self._flop_s

    def draft_time_s(self, decode: list[SeqWork], tokens: int) -> float:
        """Seconds an EAGLE-style draft head takes to propose ``tokens`` drafts for every sequence of ``decode``:
        ``tokens`` passes, one after another, each of one decoder layer and the output head over one token per
        sequence (the layer's weights, the output head and the sequences' KV of that layer read once per pass)."""
        if not decode or tokens < 1:
            return 0.0
        a, tp = self.arch, self.tp
        seqs = len(decode)
        context = sum(min(w.context_tokens + w.new_tokens, self._window) for w in decode)
        flops = seqs * (self._linear_flops / a.layers + self._head_flops) / tp
        flops += self._attn_flops_per_pair / a.layers * context / tp
        layer = (a.attention_params + a.experts_per_token * a.expert_params) * a.linear_weight_bytes_per_param / tp
        nbytes = layer + a.lm_head_params * a.dtype_bytes / tp + context * self.kv_bytes_per_token_per_gpu / a.layers
        return tokens * max(flops / self._flop_s, nbytes / self._byte_s)

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
            "compute_efficiency": self.compute_efficiency,  # the profile's, on this GPU's architecture
            "gpu_spec": {
                "description": g.description,
                "arch": g.arch,
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
            "memory_plan_gb_per_gpu": self.memory.describe(),
            "chunked_prefill": self.chunked_prefill,
            "kv_cache_gb_per_gpu": self.kv_cache_memory_bytes / 1e9,
            "kv_bytes_per_token": a.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            **({"lora_rank": self.lora_rank, "lora_gb_per_adapter_per_gpu": self._lora_bytes / 1e9}
               if self.lora_rank else {}),
            # the model's error on held-out published figures (data/expected_error.yaml), for the card
            "expected_error": read_data("expected_error.yaml"),
        }


def _architecture(model: str | None, model_config: Path | None) -> Architecture:
    if model_config is not None:
        return load_model_config(Path(model_config), name=model)
    if model:
        return find_model(model)
    raise UsageError(f"name a model (known models are {', '.join(list_models())}) or pass --model-config")


def profile_chunked_prefill(*, engine: str, model: str | None, model_config: Path | None,
                            max_model_len: int | None = None) -> bool:
    """Whether the ``engine`` profile prefills ``model`` in chunks at a served context of ``max_model_len``
    (else the model's): :meth:`EngineProfile.prefills_in_chunks`."""
    profile = find_engine(engine)
    if profile.chunked_prefill != "long_context":
        return profile.chunked_prefill == "on"
    arch = _architecture(model, model_config)
    served = min(max_model_len or arch.max_model_len, profile.max_model_len or arch.max_model_len)
    return profile.prefills_in_chunks(arch, served)


def build_perf_model(*, model: str | None, model_config: Path | None, gpu: str, tp: int = 1,
                     engine: str = "vllm", lora_rank: int = 0) -> PerfModel:
    """The roofline model of ``model`` (a preset name, or any name when ``model_config`` is given: a Hugging
    Face ``config.json``) on ``tp`` x ``gpu`` under the ``engine`` profile.

    Raises :class:`UsageError` for an unknown model, GPU or engine profile (the message lists the known
    names), an unreadable config, or a model that does not fit."""
    g = find_gpu(gpu)
    profile = find_engine(engine)
    return RooflinePerf(_architecture(model, model_config), g, profile, tp=tp, lora_rank=lora_rank)
