"""What the served model does besides answering: reasoning before it answers, speculative decoding, LoRA adapters
(:mod:`cardgen.sim.reasoning`, :mod:`cardgen.sim.speculation`, :mod:`cardgen.sim.lora`), and time its server spends
on each request outside compute before the prefill (``host_s_per_token`` per prompt token: a host-side cache
copy, as llama.cpp's ``--cache-ram`` prompt cache does).

One :class:`ServedModel` says it for a virtual server, whichever way it runs: ``cardgen serve-sim``'s flags
(:meth:`ServedModel.argv` writes them), a modelled ``cardgen build`` (in virtual time, or ``--real-time``), and a
resumed run (:meth:`ServedModel.of_described` reads them back from run.json's ``sim``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cardgen.errors import UsageError
from cardgen.sim.lora import DEFAULT_RANK, LoraServing
from cardgen.sim.speculation import Speculation


@dataclass(frozen=True)
class ServedModel:
    """The reasoning share of every output, speculative decoding (None: off), the LoRA adapters (None: none)."""

    reasoning_share: float = 0.0
    speculation: Speculation | None = None
    lora: LoraServing | None = None
    host_s_per_token: float = 0.0  # seconds outside compute per prompt token, before the request joins the queue

    def __post_init__(self) -> None:
        if not 0.0 <= self.reasoning_share <= 1.0:
            raise UsageError(f"--reasoning-share must be in [0, 1], not {self.reasoning_share:g}")
        if not 0.0 <= self.host_s_per_token <= 1.0:
            raise UsageError(f"--host-s-per-token must be in [0, 1] seconds, not {self.host_s_per_token:g}")

    def host_delay_s(self, prompt_tokens: int) -> float:
        """The time a request of ``prompt_tokens`` spends in the server before it joins the queue."""
        return self.host_s_per_token * prompt_tokens

    @classmethod
    def of_options(cls, *, reasoning_share: float = 0.0, spec_tokens: int = 0, spec_acceptance: float | None = None,
                   spec_method: str = "ngram", adapters: tuple[str, ...] = (), lora_rank: int | None = None,
                   max_loras: int | None = None, host_s_per_token: float = 0.0) -> ServedModel:
        """From the command line's flags; a one-line UsageError for flags that do not go together."""
        speculation = None
        if spec_tokens:
            if spec_acceptance is None:
                raise UsageError("--spec-tokens needs --spec-acceptance (the share of draft tokens accepted, 0 to 1)")
            speculation = Speculation(tokens=spec_tokens, acceptance=spec_acceptance, method=spec_method)
        elif spec_acceptance is not None:
            raise UsageError("--spec-acceptance needs --spec-tokens (the draft tokens per step)")
        lora = None
        if adapters:
            lora = LoraServing(adapters=tuple(adapters), rank=lora_rank or DEFAULT_RANK, max_loras=max_loras)
        elif lora_rank is not None or max_loras is not None:
            raise UsageError("--lora-rank and --max-loras need adapters: name them (--lora-adapters, or "
                             "'adapters:' in a suite entry)")
        return cls(reasoning_share=reasoning_share, speculation=speculation, lora=lora,
                   host_s_per_token=host_s_per_token)

    @classmethod
    def of_described(cls, sim: Mapping[str, Any]) -> ServedModel:
        """What run.json's ``sim`` (:meth:`described`) says the virtual server did."""
        spec, lora = sim.get("speculative"), sim.get("lora")
        return cls(reasoning_share=float(sim.get("reasoning_share") or 0.0),
                   speculation=Speculation(tokens=int(spec["tokens"]), acceptance=float(spec["acceptance_rate"]),
                                           method=str(spec.get("method", "ngram"))) if spec else None,
                   lora=LoraServing(adapters=tuple(lora["adapters"]), rank=int(lora["rank"]),
                                    max_loras=int(lora["max_loras"])) if lora else None,
                   host_s_per_token=float(sim.get("host_s_per_token") or 0.0))

    def argv(self) -> list[str]:
        """``cardgen serve-sim``'s flags for it."""
        out: list[str] = []
        if self.reasoning_share:
            out += ["--reasoning-share", repr(self.reasoning_share)]
        if self.speculation is not None:
            s = self.speculation
            out += ["--spec-tokens", str(s.tokens), "--spec-acceptance", repr(s.acceptance), "--spec-method", s.method]
        if self.lora is not None:
            out += ["--lora-adapters", ",".join(self.lora.adapters), "--lora-rank", str(self.lora.rank),
                    "--max-loras", str(self.lora.slots)]
        if self.host_s_per_token:
            out += ["--host-s-per-token", repr(self.host_s_per_token)]
        return out

    def described(self) -> dict[str, object]:
        """What ``/cardgen/sim`` and run.json's ``sim`` say of it (nothing when it does none of the three)."""
        out: dict[str, object] = {}
        if self.reasoning_share:
            out["reasoning_share"] = self.reasoning_share
        if self.speculation is not None:
            out["speculative"] = self.speculation.describe()
        if self.lora is not None:
            out["lora"] = self.lora.describe()
        if self.host_s_per_token:
            out["host_s_per_token"] = self.host_s_per_token
        return out

    def scheduler_options(self, seed: int) -> dict[str, Any]:
        """What the scheduler takes from it: speculative decoding, the LoRA slots, the seed of its draws."""
        return {"spec": self.speculation, "max_loras": self.lora.slots if self.lora is not None else None,
                "seed": seed}
