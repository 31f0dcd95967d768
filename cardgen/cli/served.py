"""The virtual server's flags for what its model does besides answering (reasoning, speculative decoding, LoRA):
the same on ``cardgen serve-sim`` and on ``cardgen build`` without ``--url`` (:class:`~cardgen.sim.served.
ServedModel`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cardgen.sim.lora import DEFAULT_RANK
from cardgen.sim.speculation import METHODS

F = TypeVar("F", bound=Callable[..., Any])
NAMES = ("reasoning_share", "spec_tokens", "spec_acceptance", "spec_method", "lora_rank", "max_loras",
         "host_s_per_token")


def served_model_options(*, adapters: bool) -> Callable[[F], F]:
    """``--reasoning-share``, ``--spec-tokens``, ``--spec-acceptance``, ``--spec-method``, ``--lora-rank``,
    ``--max-loras``; with ``adapters``, ``--lora-adapters`` too (``build`` takes the adapters from the suite)."""
    options = [
        click.option("--reasoning-share", type=float, default=0.0, show_default=True,
                     help="Virtual server: the share of every output the model spends reasoning, streamed as a "
                          "reasoning parser streams it (chat: delta.reasoning; completions: a <think> span)."),
        click.option("--spec-tokens", type=int, default=0, show_default=True,
                     help="Virtual server: speculative decoding with this many draft tokens per step (0: off)."),
        click.option("--spec-acceptance", type=float,
                     help="Virtual server: the share of draft tokens accepted (vLLM's acceptance rate, 0 to 1)."),
        click.option("--spec-method", type=click.Choice(METHODS), default="ngram", show_default=True,
                     help="Virtual server: how drafts are made: ngram (no GPU time) or eagle (a one-layer draft "
                          "head, run once per draft token)."),
        click.option("--lora-rank", type=int, help=f"Virtual server: the LoRA adapters' rank [{DEFAULT_RANK}]."),
        click.option("--max-loras", type=int, help="Virtual server: the most distinct adapters in one step "
                                                     "[every adapter]."),
        click.option("--host-s-per-token", type=float, default=0.0, show_default=True,
                     help="Virtual server: seconds each request spends outside compute before its prefill, per "
                          "prompt token (a host-side cache copy, as llama.cpp's --cache-ram prompt cache)."),
    ]
    if adapters:
        options.append(click.option("--lora-adapters", default="", help="LoRA adapters served by name, "
                                    "comma-separated (a request names one as its model)."))

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply
