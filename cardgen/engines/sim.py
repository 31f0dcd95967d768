"""cardgen's own virtual GPU server: ``/version`` says ``{"engine": "cardgen-sim"}`` and ``/cardgen/sim``
describes what is modelled. It exposes vLLM's metric names, so reading them is vLLM's job, KV capacity included:
``/cardgen/sim`` is not read for it, so that ``--hide-cache-config`` leaves the card to estimate the capacity,
as it must for a vLLM that hides ``vllm:cache_config_info``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int, mapping_at
from cardgen.engines.vllm import VllmAdapter

ENGINE_ID = "cardgen-sim"


class SimAdapter(VllmAdapter):
    name = ENGINE_ID
    label = "cardgen virtual GPU server"
    launchable = False
    install_hint = "start it with 'cardgen serve-sim'"
    time_hints = {**VllmAdapter.time_hints,
                  "other_server": "the virtual server's host time per prompt token (--host-s-per-token), as a "
                                  "host-side cache copy"}

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        if not (isinstance(version, Mapping) and version.get("engine") == ENGINE_ID):
            return None
        return self.read_extra(fetch, version)

    def read_extra(self, fetch: Fetch, version: Any) -> dict[str, Any]:
        sim = fetch.json("/cardgen/sim")
        return {"sim": sim} if sim is not None else {}

    def scheduler_settings(self, samples: Samples, extra: Mapping[str, Any], launch: Mapping[str, Any] | None, *,
                           version: str | None = None, device: str | None = None) -> dict[str, tuple[Any, str]]:
        """vLLM's reading of the cache config, and the scheduler ``/cardgen/sim`` describes (its policy and limits,
        as a vLLM log would state them; never the performance model's constants)."""
        out = VllmAdapter.scheduler_settings(self, samples, extra, launch, version="0.0", device=device)
        scheduler = mapping_at(mapping_at(extra, "sim"), "scheduler")
        where = "/cardgen/sim scheduler"
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = as_int(scheduler.get(name))
            if value:
                out.setdefault(name, (value, where))
        if scheduler.get("policy") in ("chunked-prefill", "prefill-first"):
            out["chunked_prefill"] = (scheduler["policy"] == "chunked-prefill", f"{where} policy")
        return out

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        return EngineAdapter.launch_command(self, model, host, port, args)

    def check_installed(self) -> str | None:
        return EngineAdapter.check_installed(self)

    def installed_version(self) -> str | None:
        return None

    def default_env(self) -> dict[str, str]:
        return {}
