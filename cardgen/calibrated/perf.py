"""The fitted virtual server: a :class:`~cardgen.sim.perf.PerfModel` of its own.

Its step takes what the roofline model's does (:mod:`cardgen.sim.roofline`), with the engine profile's speed
constants replaced by free ones, in absolute units so that they mean the same on any hardware:

    max(FLOPs / compute rate, bytes / bandwidth) + all-reduce + step overhead + per-sequence overhead x sequences

and every request takes ``request_overhead_s`` more outside the steps (the API server's HTTP, tokenizing and
detokenizing; on vLLM's CPU build about 7 ms, a third of a short prompt's TTFT): the virtual-time driver adds it
as a network delay, half on the way in and half on the way out (``network_s``), so that it lengthens TTFT and
E2E latency but not the decode.

The FLOPs and bytes of a step are the architecture's (layers, heads, KV heads, hidden, vocabulary, dtype,
tensor parallel); the scheduler (KV capacity, block size, sequences and tokens a step, chunked prefill) is the
measured server's own (:mod:`cardgen.calibrated.settings`). The fit starts from the starting engine profile on
the named GPU: its compute rate is that GPU's peak times the profile's compute efficiency, and so on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cardgen.calibrated.settings import ServerSettings
from cardgen.sim.perf import SeqWork
from cardgen.sim.roofline import RooflinePerf


@dataclass(frozen=True)
class ConstantSpec:
    name: str
    label: str
    unit: str


#: the free constants, in the order of a :class:`Constants` vector
SPECS = (
    ConstantSpec("compute_flop_s", "compute rate (bounds long prefills)", "FLOP/s"),
    ConstantSpec("bandwidth_byte_s", "memory bandwidth reached (bounds decode)", "B/s"),
    ConstantSpec("step_overhead_s", "fixed cost of an engine step", "s"),
    ConstantSpec("per_seq_overhead_s", "cost per sequence in a step", "s"),
    ConstantSpec("request_overhead_s", "latency of a request outside the engine's steps (HTTP, tokenizing, the API "
                 "server)", "s"),
)
START_REQUEST_OVERHEAD_S = 0.001  # engine profiles model no request overhead: the fit starts from 1 ms
NAMES = tuple(s.name for s in SPECS)


@dataclass(frozen=True)
class Constants:
    """Values of the free constants, in the order of :data:`SPECS` (all positive: the fit works on their logs)."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(SPECS) or not all(v > 0 and math.isfinite(v) for v in self.values):
            raise ValueError(f"constants must be {len(SPECS)} positive numbers, not {self.values}")

    def __getitem__(self, name: str) -> float:
        return self.values[NAMES.index(name)]

    def log(self) -> np.ndarray:
        return np.log(np.asarray(self.values, dtype=float))

    @classmethod
    def from_log(cls, theta: np.ndarray) -> Constants:
        return cls(tuple(float(v) for v in np.exp(theta)))

    @classmethod
    def of_profile(cls, shape: RooflinePerf) -> Constants:
        """The starting values: the roofline model's own (its engine profile on its GPU)."""
        e = shape.engine
        return cls((shape.gpu.peak_flops * shape.compute_efficiency, shape.gpu.bandwidth_bytes_s * e.bandwidth_efficiency,
                    e.step_overhead_s, e.per_seq_overhead_s, START_REQUEST_OVERHEAD_S))


class FittedPerf:
    """The roofline step of ``shape``'s architecture with ``constants``, on the scheduler of ``settings``."""

    def __init__(self, shape: RooflinePerf, constants: Constants, settings: ServerSettings) -> None:
        self.shape, self.constants, self.settings = shape, constants, settings
        self.kv_capacity_tokens = settings.kv_capacity_tokens
        self.block_size = settings.block_size
        self.max_num_seqs = settings.max_num_seqs
        self.max_num_batched_tokens = settings.max_num_batched_tokens
        self.chunked_prefill = settings.chunked_prefill
        self.max_model_len = settings.max_model_len
        self._flop_s, self._byte_s, self._step_s, self._seq_s, self.request_overhead_s = constants.values

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        if not prefill and not decode:
            return 0.0
        cost = self.shape.cost(prefill, decode)
        seqs = len(prefill) + len(decode)
        return (max(cost.flops / self._flop_s, cost.bytes / self._byte_s) + cost.comm_s + self._step_s
                + self._seq_s * seqs)

    def describe(self) -> dict[str, object]:
        a = self.shape.arch
        return {
            "kind": "calibrated",
            "model": a.name,
            "hf_id": a.hf_id,
            "gpu": self.shape.gpu.name,
            "tp": self.shape.tp,
            "constants": dict(zip(NAMES, self.constants.values, strict=True)),
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "chunked_prefill": self.chunked_prefill,
            "max_model_len": self.max_model_len,
        }
