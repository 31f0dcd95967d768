"""What one virtual server is: the modelled engine (a :class:`~cardgen.sim.perf.PerfModel`) and the server's
own options (address, faults, stamp log, switches tests use to hide features).

``build_perf`` turns the command line's model/GPU/perf options into a PerfModel: ``--perf fixed`` with
``--fixed-json`` (fields of :class:`~cardgen.sim.perf.FixedPerf`), else the roofline model
(``cardgen.sim.roofline.build_perf_model``, imported only when used).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cardgen.errors import UsageError
from cardgen.sim.faults import FaultPlan
from cardgen.sim.perf import FixedPerf, PerfModel
from cardgen.sim.roofline import build_perf_model, profile_chunked_prefill
from cardgen.sim.served import ServedModel

PERF_KINDS = ("roofline", "fixed")


@dataclass(frozen=True)
class SimConfig:
    """Everything ``cardgen serve-sim`` was asked for."""

    model: str
    gpu: str = "A100-80GB"
    model_config: Path | None = None
    tp: int = 1
    engine: str = "vllm"
    perf: str = "roofline"  # roofline | fixed
    fixed_json: str | None = None
    served_model_name: str | None = None  # the id clients send; default: model
    max_model_len: int | None = None  # default: the model's context length, capped by the KV cache
    chunked_prefill: bool | None = None  # None: as the engine profile does it (False for --perf fixed)
    eos_rate: float = 0.004  # chance per output token of a modelled EOS (without ignore_eos / min_tokens)
    seed: int = 0
    faults: FaultPlan = field(default_factory=FaultPlan)

    host: str = "127.0.0.1"
    port: int = 8000
    port_file: Path | None = None
    max_lifetime_s: float = 3600.0  # 0: no limit
    watch_parent: bool = True  # stop when the parent process dies
    stamp_log: Path | None = None
    fine_sleep_s: float = 0.0015  # the last stretch before a step's end: a precise blocking sleep

    tokenize: bool = True  # False: /tokenize and /detokenize answer 404
    cache_config: bool = True  # False: no vllm:cache_config_info
    metrics: bool = True  # False: /metrics answers 404

    served: ServedModel = field(default_factory=ServedModel)  # reasoning, speculative decoding, LoRA adapters

    def __post_init__(self) -> None:
        if self.perf not in PERF_KINDS:
            raise UsageError(f"--perf must be one of {', '.join(PERF_KINDS)}, not {self.perf!r}")
        if self.perf == "fixed" and self.model_config is not None:
            raise UsageError("--model-config is used by the roofline model only; drop it or --perf fixed")
        if self.tp < 1:
            raise UsageError("--tp must be at least 1")
        if not 0.0 <= self.eos_rate < 1.0:
            raise UsageError("--eos-rate must be in [0, 1)")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise UsageError("--max-model-len must be at least 2")
        if self.max_lifetime_s < 0 or self.fine_sleep_s < 0:
            raise UsageError("--max-lifetime-s and --fine-sleep-s must not be negative")
        if self.chunked_prefill is None:  # frozen: the resolved switch is set once, here
            object.__setattr__(self, "chunked_prefill", self._profile_chunked_prefill())

    def _profile_chunked_prefill(self) -> bool:
        """Whether the engine profile prefills in chunks for this model (vLLM V1 always, 0.5-0.6 above 32k
        tokens of context). An unknown model, GPU or profile answers False here; ``build_perf`` reports it."""
        if self.perf != "roofline":
            return False
        try:
            return profile_chunked_prefill(engine=self.engine, model=self.model, model_config=self.model_config,
                                           max_model_len=self.max_model_len)
        except (UsageError, ValueError, KeyError, OSError):
            return False

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    def scheduler_options(self) -> dict[str, Any]:
        """What the scheduler takes from the served model: speculative decoding, the LoRA slots, the seed."""
        return self.served.scheduler_options(self.seed)


def parse_faults(
    spec: str | None, *, after_tokens: int = 3, slow_first_s: float = 1.0, stall_s: float = 60.0
) -> FaultPlan:
    """``--faults`` and its timing options as a FaultPlan; a bad spec is a UsageError."""
    try:
        return FaultPlan.parse(spec, after_tokens=after_tokens, slow_first_s=slow_first_s, stall_s=stall_s)
    except ValueError as exc:
        raise UsageError(f"--faults: {exc}") from None


def fixed_perf(fixed_json: str | None) -> FixedPerf:
    """A FixedPerf from a JSON object of its fields (unknown fields are an error)."""
    if not fixed_json:
        return FixedPerf()
    try:
        data = json.loads(fixed_json)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--fixed-json is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError("--fixed-json must be a JSON object")
    # its numbers (the vision encoder it times images with is no number: not set from JSON)
    known = {f.name for f in dataclasses.fields(FixedPerf) if isinstance(f.default, int | float)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(
            f"--fixed-json: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    try:
        perf = FixedPerf(**data)
    except TypeError as exc:
        raise UsageError(f"--fixed-json: {exc}") from None
    for name in known:
        value = getattr(perf, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise UsageError(f"--fixed-json: {name} must be a positive number, not {value!r}")
    if perf.kv_capacity_tokens < perf.block_size:
        raise UsageError("--fixed-json: kv_capacity_tokens must hold at least one block")
    return perf


def build_perf(config: SimConfig) -> PerfModel:
    """The PerfModel ``config`` asks for. Unknown model or GPU: a UsageError from the roofline model."""
    if config.perf == "fixed":
        return fixed_perf(config.fixed_json)
    if config.fixed_json:
        raise UsageError("--fixed-json needs --perf fixed")
    try:
        return build_perf_model(
            model=config.model,
            model_config=config.model_config,
            gpu=config.gpu,
            tp=config.tp,
            engine=config.engine,
            lora_rank=config.served.lora.rank if config.served.lora is not None else 0,
        )
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None


def max_model_len(config: SimConfig, perf: PerfModel) -> int:
    """The longest sequence (prompt + output) a request may ask for: ``--max-model-len``, else the model's
    context length (``perf.max_model_len`` when the model has one), never more than the KV cache holds."""
    kv = int(perf.kv_capacity_tokens)
    wanted = config.max_model_len or getattr(perf, "max_model_len", None) or kv
    return max(1, min(int(wanted), kv))


def _find(data: object, key: str) -> object:
    """The first value of ``key`` in nested dicts (breadth first), or None."""
    queue = [data]
    while queue:
        item = queue.pop(0)
        if isinstance(item, dict):
            if item.get(key) is not None:
                return item[key]
            queue.extend(item.values())
    return None


def cache_config_labels(perf: PerfModel, *, max_len: int) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` for ``perf`` (unset fields are "None", as vLLM writes them)."""
    described = perf.describe()
    utilization = getattr(perf, "gpu_memory_utilization", None) or _find(described, "gpu_memory_utilization")
    kv_gb = _find(described, "kv_cache_gb_per_gpu")
    kv_bytes = getattr(perf, "kv_cache_memory_bytes", None) or (
        int(float(kv_gb) * 1e9) if isinstance(kv_gb, int | float) else None
    )
    blocks = int(perf.kv_capacity_tokens) // int(perf.block_size)
    tokens = blocks * int(perf.block_size)
    return {
        "block_size": str(perf.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": str(utilization),
        "is_attention_free": "False",
        "kv_cache_max_concurrency": f"{tokens / max_len:.2f}",
        "kv_cache_memory_bytes": str(kv_bytes),
        "kv_cache_size_tokens": str(tokens),
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "swap_space_bytes": "0",
    }
