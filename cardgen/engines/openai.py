"""Any other OpenAI-compatible server: nothing is known beyond ``/v1/models``."""

from __future__ import annotations

from cardgen.engines.base import EngineAdapter


class OpenAIAdapter(EngineAdapter):
    name = "openai-compatible"
    label = "OpenAI-compatible server"
