"""Speculative decoding in the virtual server: ``--spec-tokens K --spec-acceptance A``.

Every decode step of a sequence verifies K draft tokens: the target model computes K + 1 positions for it
(:class:`~cardgen.sim.perf.SeqWork` of K + 1 new tokens), and the sequence gains 1 + j tokens, j the drafts
accepted. Draft i is accepted with probability p when every draft before it was (so position i is accepted in a
share p^(i+1) of the drafts, vLLM's per-position acceptance), p chosen so that the expected accepted / drafted is
A: vLLM's acceptance rate (``vllm:spec_decode_num_accepted_tokens / num_draft_tokens``), the figure the card
reports. Mean accepted tokens per draft = K x A; vLLM's mean acceptance length = 1 + K x A.

Drafting: ``ngram`` looks the drafts up in the prompt and output (on the CPU: no GPU time); ``eagle`` runs a
one-layer draft head K times per step over the decoding sequences (:meth:`cardgen.sim.roofline.RooflinePerf.
draft_time_s`). Draws are seeded: the same run gives the same steps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cardgen.errors import UsageError

METHODS = ("ngram", "eagle")
MAX_TOKENS = 16


def expected_accepted(p: float, k: int) -> float:
    """Expected accepted drafts out of ``k`` when each is accepted with probability ``p`` after an accepted one."""
    return float(k) if p >= 1.0 else sum(p ** (i + 1) for i in range(k))


def conditional_acceptance(rate: float, k: int) -> float:
    """The p whose expected accepted / drafted over ``k`` drafts is ``rate`` (bisection: it grows with p)."""
    if rate <= 0.0:
        return 0.0
    if rate >= 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_accepted(mid, k) / k < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True, slots=True)
class Speculation:
    """K draft tokens per step at acceptance rate A, drafted by ``method``."""

    tokens: int
    acceptance: float
    method: str = "ngram"
    p: float = field(init=False)  # the conditional acceptance of each draft position

    def __post_init__(self) -> None:
        if not 1 <= self.tokens <= MAX_TOKENS:
            raise UsageError(f"--spec-tokens must be 1 to {MAX_TOKENS}, not {self.tokens}")
        if not 0.0 <= self.acceptance <= 1.0:
            raise UsageError(f"--spec-acceptance must be in [0, 1], not {self.acceptance:g}")
        if self.method not in METHODS:
            raise UsageError(f"--spec-method must be one of {', '.join(METHODS)}, not {self.method!r}")
        object.__setattr__(self, "p", conditional_acceptance(self.acceptance, self.tokens))

    def per_position(self) -> list[float]:
        """The expected share of drafts whose position i (from 0) is accepted: p^(i+1)."""
        return [self.p ** (i + 1) for i in range(self.tokens)]

    def draw(self, rng: random.Random) -> int:
        """Drafts accepted in one step (0 to K)."""
        j = 0
        while j < self.tokens and rng.random() < self.p:
            j += 1
        return j

    def describe(self) -> dict[str, object]:
        return {"tokens": self.tokens, "acceptance_rate": self.acceptance, "method": self.method,
                "conditional_acceptance": self.p, "mean_accepted_tokens": self.tokens * self.acceptance,
                "per_position": self.per_position()}


@dataclass
class SpecCounters:
    """What vLLM counts (``vllm:spec_decode_*``), kept by the scheduler."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def observe(self, drafted: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += drafted
        self.accepted_tokens += accepted
        if len(self.accepted_per_pos) < drafted:
            self.accepted_per_pos.extend([0] * (drafted - len(self.accepted_per_pos)))
        for i in range(accepted):
            self.accepted_per_pos[i] += 1
