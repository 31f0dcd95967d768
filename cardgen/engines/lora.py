"""LoRA adapters an engine started by cardgen serves: ``--lora-module NAME=PATH`` on ``cardgen build --launch``.

Each adapter is a PEFT directory (``adapter_config.json`` and its weights); its rank is read from the config
(``r``), so that the engine reserves room for the largest. The engine's own flags are its adapter's
(:meth:`cardgen.engines.base.EngineAdapter.lora_args`): vLLM ``--enable-lora --lora-modules NAME=PATH ...
--max-loras N --max-lora-rank R``, SGLang ``--enable-lora --lora-paths NAME=PATH ... --max-loras-per-batch N
--max-lora-rank R``, N being every adapter (cardgen measures them sharing batches, not queueing for a slot).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cardgen.errors import UsageError

# the ranks vLLM accepts for --max-lora-rank
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class LoraModule:
    """One adapter: the model name requests ask for, its directory, its rank."""

    name: str
    path: Path
    rank: int

    @classmethod
    def parse(cls, spec: str) -> LoraModule:
        """``NAME=PATH``; a one-line UsageError for anything else, or a directory without a PEFT config."""
        name, eq, path = spec.partition("=")
        if not eq or not name.strip() or not path.strip():
            raise UsageError(f"--lora-module {spec!r}: give NAME=PATH (the name requests ask for, the adapter's "
                             "directory)")
        config = Path(path.strip()) / "adapter_config.json"
        try:
            rank = int(json.loads(config.read_text("utf-8"))["r"])
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(f"--lora-module {name.strip()}: {config} is missing or has no rank 'r': give a PEFT "
                             "adapter's directory") from None
        return cls(name=name.strip(), path=Path(path.strip()).resolve(), rank=rank)


def max_rank(modules: Sequence[LoraModule], allowed: Sequence[int] = VLLM_RANKS) -> int:
    """The smallest allowed rank that holds every adapter's."""
    largest = max(m.rank for m in modules)
    return next((r for r in allowed if r >= largest), largest)


def check_served(modules: Sequence[LoraModule], asked: Sequence[str]) -> None:
    """A one-line UsageError when the suite asks for an adapter no ``--lora-module`` serves."""
    missing = [a for a in asked if a not in {m.name for m in modules}]
    if missing:
        raise UsageError(f"the suite asks for adapter {missing[0]!r}, which no --lora-module serves: add "
                         f"--lora-module {missing[0]}=PATH")
