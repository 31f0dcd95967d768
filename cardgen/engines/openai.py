"""Any other OpenAI-compatible server: nothing is known beyond ``/v1/models``."""

from __future__ import annotations

from cardgen.engines.base import EngineAdapter


class OpenAIAdapter(EngineAdapter):
    name = "openai-compatible"
    label = "OpenAI-compatible server"
    #: vLLM's fields, and transformers serve's per-request generation config (it refuses vLLM's with 422): the
    #: server keeps those it takes (cardgen.load.dialect)
    length_fields = ("min_tokens", "ignore_eos", "generation_config")
