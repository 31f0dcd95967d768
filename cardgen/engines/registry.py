"""Which adapters exist, and finding one by name."""

from __future__ import annotations

from cardgen.engines.base import EngineAdapter
from cardgen.engines.llamacpp import LlamaCppAdapter
from cardgen.engines.openai import OpenAIAdapter
from cardgen.engines.sglang import SglangAdapter
from cardgen.engines.sim import SimAdapter
from cardgen.engines.tgi import TgiAdapter
from cardgen.engines.vllm import VllmAdapter
from cardgen.errors import UsageError

ADAPTERS: dict[str, EngineAdapter] = {
    a.name: a for a in (VllmAdapter(), SglangAdapter(), TgiAdapter(), LlamaCppAdapter(), SimAdapter(),
                        OpenAIAdapter())
}
ENGINES = tuple(ADAPTERS)
LAUNCHABLE = tuple(name for name, a in ADAPTERS.items() if a.launchable)
ALIASES = {
    "llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "llama-server": "llamacpp",
    "text-generation-inference": "tgi", "sim": "cardgen-sim", "openai": "openai-compatible",
    "generic": "openai-compatible", "unknown": "openai-compatible",
}
#: the order in which probe() tries to recognise a server (the most specific answers first)
DETECTION_ORDER = ("cardgen-sim", "tgi", "llamacpp", "sglang", "vllm")


def engine_name(engine: str) -> str:
    """The canonical name of ``engine`` (``llama.cpp`` -> ``llamacpp``); raises ``UsageError`` if unknown."""
    key = (engine or "").strip().lower()
    key = ALIASES.get(key, key)
    if key not in ADAPTERS:
        raise UsageError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
    return key


def get_adapter(engine: str | None) -> EngineAdapter:
    """The adapter for ``engine``; an unknown or missing engine gets the generic OpenAI one."""
    key = ALIASES.get((engine or "").strip().lower(), (engine or "").strip().lower())
    return ADAPTERS.get(key, ADAPTERS["openai-compatible"])
