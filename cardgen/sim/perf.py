"""The virtual server's performance model interface: how long one engine step takes.

The scheduler (``cardgen.sim.scheduler``) decides what runs in a step; a :class:`PerfModel` says how long
that step takes on the modelled hardware. Two implementations:

- :class:`FixedPerf` (here): plain constants, for tests that need a server with exactly known behaviour
  (prefill rate, step time, KV capacity).
- the roofline model (``cardgen.sim.roofline``): built from the model architecture, the GPU and an engine
  profile.

A model that can time a request's encoder work (images, :mod:`cardgen.sim.vision`) has ``vision`` (the encoder that
makes an image's tokens and FLOPs) and ``encode_time_s(flops)``; both of these have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from cardgen.sim.vision import DEFAULT_VISION, VisionEncoder


class SeqWork(NamedTuple):
    """One sequence's share of a step: ``new_tokens`` computed this step (a prompt chunk, 1 when decoding, 1 + K
    when verifying K speculative drafts) on top of ``context_tokens`` already in its KV cache; ``adapter``: the
    LoRA adapter it runs with (None: the base model). A named tuple, not a frozen dataclass: the scheduler makes
    one per running sequence per step (millions in a calibration's fit), and a tuple is made several times
    faster."""

    new_tokens: int
    context_tokens: int
    adapter: str | None = None


class PerfModel(Protocol):
    """What the scheduler needs to know about the modelled engine on the modelled GPU."""

    kv_capacity_tokens: int  # KV cache size in tokens (a multiple of block_size)
    block_size: int  # tokens per KV block
    max_num_seqs: int  # most sequences running at once
    max_num_batched_tokens: int  # most tokens computed in one step (prefill budget)

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        """Seconds one engine step takes that computes ``prefill`` prompt chunks and one token for each of
        ``decode``. Never below the hardware's roofline."""
        ...

    def describe(self) -> dict[str, object]:
        """Plain data that says what is modelled (for ``run.json`` and the card)."""
        ...


@dataclass
class FixedPerf:
    """A step costs ``step_overhead_s`` + ``per_seq_s`` per decoding sequence + prompt tokens / ``prefill_tok_s``.

    Exactly known behaviour for tests: a single request of P prompt tokens has TTFT = overhead + P /
    prefill_tok_s; decoding alone at batch B has a step time of overhead + B * per_seq_s.
    """

    prefill_tok_s: float = 20_000.0
    step_overhead_s: float = 0.010
    per_seq_s: float = 0.0002
    kv_capacity_tokens: int = 65_536
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    # a request's images: the encoder that makes their tokens and work, and the FLOP/s it runs at
    vision: VisionEncoder = field(default=DEFAULT_VISION)
    encode_flop_s: float = 1e14

    def step_time_s(self, prefill: list[SeqWork], decode: list[SeqWork]) -> float:
        prompt_tokens = sum(w.new_tokens for w in prefill)
        return self.step_overhead_s + self.per_seq_s * len(decode) + prompt_tokens / self.prefill_tok_s

    def uniform_decode_s(self, seqs: int, context: int) -> float:
        """:meth:`step_time_s` of a step that decodes one token for each of ``seqs`` sequences and prefills nothing
        (``context``, the tokens they hold, does not change it)."""
        return self.step_overhead_s + self.per_seq_s * seqs

    def encode_time_s(self, flops: float) -> float:
        """Seconds of encoder work (a request's images) of ``flops``."""
        return flops / self.encode_flop_s

    def describe(self) -> dict[str, object]:
        return {
            "kind": "fixed",
            "prefill_tok_s": self.prefill_tok_s,
            "step_overhead_s": self.step_overhead_s,
            "per_seq_s": self.per_seq_s,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }
