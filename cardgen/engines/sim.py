"""cardgen's own virtual GPU server: ``/version`` says ``{"engine": "cardgen-sim"}`` and ``/cardgen/sim``
describes what is modelled. It exposes vLLM's metric names, so reading them is vLLM's job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int
from cardgen.engines.vllm import VllmAdapter

ENGINE_ID = "cardgen-sim"


def _find_key(data: Any, key: str) -> Any:
    if isinstance(data, Mapping):
        if key in data:
            return data[key]
        for value in data.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    return None


class SimAdapter(VllmAdapter):
    name = ENGINE_ID
    label = "cardgen virtual GPU server"
    launchable = False
    install_hint = "start it with 'cardgen serve-sim'"

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        if not (isinstance(version, Mapping) and version.get("engine") == ENGINE_ID):
            return None
        return self.read_extra(fetch, version)

    def read_extra(self, fetch: Fetch, version: Any) -> dict[str, Any]:
        sim = fetch.json("/cardgen/sim")
        return {"sim": sim} if sim is not None else {}

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        found = super().kv_config(samples, extra)
        if found is not None:
            return found
        tokens = as_int(_find_key(extra.get("sim"), "kv_capacity_tokens"))
        if tokens:
            return {"tokens": tokens, "source": "/cardgen/sim kv_capacity_tokens"}
        return None

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        return EngineAdapter.launch_command(self, model, host, port, args)

    def check_installed(self) -> str | None:
        return EngineAdapter.check_installed(self)

    def installed_version(self) -> str | None:
        return None

    def default_env(self) -> dict[str, str]:
        return {}
