"""LoRA adapters in the virtual server: ``--lora-adapters a,b --lora-rank R --max-loras N``.

A request names an adapter as its model. A step that serves D distinct adapters reads each one's weights once,
on top of the base model's: per adapter, for every layer, the A (d_in x R) and B (R x d_out) matrices of each
adapted projection (q, k, v, o and the MLP's gate, up and down), at the model's 16-bit width, and every token of
an adapted sequence does their 2 x R x (d_in + d_out) FLOPs per projection (:meth:`cardgen.sim.roofline.
RooflinePerf.cost`). At most ``max_loras`` distinct adapters run at once: a waiting request whose adapter would be
one too many waits, and the requests behind it are admitted past it, as vLLM's scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass

from cardgen.errors import UsageError
from cardgen.sim.catalog import Architecture

DEFAULT_RANK = 16  # vLLM's default --max-lora-rank


@dataclass(frozen=True, slots=True)
class LoraServing:
    """The adapters a virtual server serves by name, their rank and how many may share a step."""

    adapters: tuple[str, ...]
    rank: int = DEFAULT_RANK
    max_loras: int | None = None  # None: every adapter at once

    def __post_init__(self) -> None:
        if not self.adapters:
            raise UsageError("LoRA needs at least one adapter name (--lora-adapters)")
        if self.rank < 1:
            raise UsageError(f"--lora-rank must be at least 1, not {self.rank}")
        if self.max_loras is not None and self.max_loras < 1:
            raise UsageError(f"--max-loras must be at least 1, not {self.max_loras}")

    @property
    def slots(self) -> int:
        """Distinct adapters one step may serve."""
        return self.max_loras or len(self.adapters)

    def describe(self) -> dict[str, object]:
        return {"adapters": list(self.adapters), "rank": self.rank, "max_loras": self.slots}


def lora_dims(arch: Architecture) -> int:
    """Σ (d_in + d_out) over one layer's adapted projections: q, k, v, o, and the MLP's (one expert's)."""
    q, kv = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    attention = (arch.hidden + q) + 2 * (arch.hidden + kv) + (q + arch.hidden)
    mats = 3 if arch.gated_mlp else 2
    return attention + mats * (arch.hidden + arch.intermediate)


def lora_params(arch: Architecture, rank: int) -> int:
    """Parameters of one adapter of ``rank`` over every layer."""
    return arch.layers * rank * lora_dims(arch)
