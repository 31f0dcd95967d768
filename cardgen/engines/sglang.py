"""SGLang: ``/server_info`` (``/get_server_info`` before 0.4.x renamed it) carries every server argument plus
``max_total_num_tokens`` (the KV pool in tokens); ``/metrics`` (with ``--enable-metrics``) names ``sglang:*``."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int, gauge
from cardgen.engines.lora import LoraModule
from cardgen.redact import redact_mapping

INFO_PATHS = ("/server_info", "/get_server_info")


class SglangAdapter(EngineAdapter):
    name = "sglang"
    label = "SGLang"
    launchable = True
    install_hint = "install SGLang into this Python: 'pip install sglang' (needs a GPU build of torch)"
    metric_names = {
        "prompt_tokens": "sglang:prompt_tokens_total",
        "generation_tokens": "sglang:generation_tokens_total",
        "requests": "sglang:num_requests_total",
        "preemptions": "sglang:num_retracted_requests_total",  # a request retracted to free KV: a preemption
        "ttft": "sglang:time_to_first_token_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "tpot": "sglang:time_per_output_token_seconds",
        "e2e": "sglang:e2e_request_latency_seconds",
        "queue": "sglang:queue_time_seconds",
        # the radix cache's token hit rate, a gauge (no query / hit counters)
        "prefix_cache_hit_rate": "sglang:cache_hit_rate",
        # speculative decoding, gauges over its last stats interval: tokens a sequence gains per verify step (the
        # bonus token included) and accepted / drafted
        "spec_accept_length": "sglang:spec_accept_length",
        "spec_accept_rate": "sglang:spec_accept_rate",
    }

    def _server_info(self, fetch: Fetch) -> tuple[str, dict[str, Any]] | None:
        for path in INFO_PATHS:
            info = fetch.json(path)
            if isinstance(info, Mapping) and ("model_path" in info or "max_total_num_tokens" in info):
                return path, dict(info)
        return None

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        found = self._server_info(fetch)
        if found is None:
            return None
        path, info = found
        return {"server_info": redact_mapping(info), "server_info_path": path}

    def server_version(self, extra: Mapping[str, Any], version: Any) -> str | None:
        info = extra.get("server_info") or {}
        if info.get("version") is not None:
            return str(info["version"])
        return super().server_version(extra, version)

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        info = extra.get("server_info") or {}
        page_size = as_int(info.get("page_size")) or as_int(gauge(samples, "sglang:page_size"))
        fields = {"block_size": page_size, "page_size": page_size}
        tokens = as_int(gauge(samples, "sglang:max_total_num_tokens", how="max"))
        if tokens:
            return {"tokens": tokens, "source": "sglang:max_total_num_tokens", **fields}
        tokens = as_int(info.get("max_total_num_tokens"))
        if tokens:
            return {"tokens": tokens, "source": "/server_info max_total_num_tokens", **fields}
        return None

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        return {
            "usage": gauge(samples, "sglang:token_usage", how="max"),
            "running": gauge(samples, "sglang:num_running_reqs"),
            "waiting": gauge(samples, "sglang:num_queue_reqs"),
            "used_tokens": gauge(samples, "sglang:num_used_tokens"),
        }

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        extra = [] if "--enable-metrics" in args else ["--enable-metrics"]
        return [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--host", host,
                "--port", str(port), *extra, *args]

    def lora_args(self, modules: Sequence[LoraModule]) -> list[str]:
        return ["--enable-lora", "--lora-paths", *(f"{m.name}={m.path}" for m in modules),
                "--max-loras-per-batch", str(len(modules)), "--max-lora-rank", str(max(m.rank for m in modules))]

    def check_installed(self) -> str | None:
        if importlib.util.find_spec("sglang") is None:
            return f"SGLang is not installed in {sys.executable}: {self.install_hint}"
        return None

    def installed_version(self) -> str | None:
        try:
            return metadata.version("sglang")
        except metadata.PackageNotFoundError:
            return None
