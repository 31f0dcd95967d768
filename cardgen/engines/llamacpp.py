"""llama.cpp ``llama-server``: ``/props`` (``total_slots``, ``default_generation_settings.n_ctx``,
``build_info``), ``/slots`` (per slot ``n_ctx``), ``/metrics`` only with ``--metrics`` (``llamacpp:*``).

KV capacity = the sum of the slots' ``n_ctx`` (each slot holds its own share of the context); llama.cpp has no
KV-usage gauge in recent builds (``llamacpp:kv_cache_usage_ratio`` existed in older ones and is read if present).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int, gauge

BINARY_ENV = "CARDGEN_LLAMA_SERVER"  # path to llama-server when it is not on PATH


def server_binary() -> str | None:
    path = os.environ.get(BINARY_ENV)
    if path:
        return path if os.access(path, os.X_OK) else None
    return shutil.which("llama-server")


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    label = "llama.cpp server"
    launchable = True
    install_hint = (f"build llama.cpp's 'llama-server' (cmake -DLLAMA_BUILD_SERVER=ON --target llama-server) "
                    f"and put it on PATH or set {BINARY_ENV}=/path/to/llama-server")
    metric_names = {
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "requests": "",
        "ttft": "",
        "itl": "",
        "e2e": "",
        "queue": "",
    }

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        props = fetch.json("/props")
        if not isinstance(props, Mapping):
            return None
        if "default_generation_settings" not in props and "total_slots" not in props:
            return None
        extra: dict[str, Any] = {"props": dict(props)}
        slots = fetch.json("/slots")  # 501 when started with --no-slots
        if isinstance(slots, list):
            extra["slots"] = slots
        return extra

    def server_version(self, extra: Mapping[str, Any], version: Any) -> str | None:
        props = extra.get("props") or {}
        return str(props["build_info"]) if props.get("build_info") else None

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        slots = extra.get("slots")
        if isinstance(slots, list) and slots:
            per_slot = [as_int(s.get("n_ctx")) for s in slots if isinstance(s, Mapping)]
            if per_slot and all(per_slot):
                return {"tokens": sum(per_slot), "source": "/slots n_ctx summed over slots",  # type: ignore[arg-type]
                        "total_slots": len(per_slot), "n_ctx_per_slot": per_slot[0]}
        props = extra.get("props") or {}
        total = as_int(props.get("total_slots"))
        n_ctx = as_int((props.get("default_generation_settings") or {}).get("n_ctx"))
        if total and n_ctx:
            return {"tokens": total * n_ctx, "source": "/props total_slots x default_generation_settings.n_ctx",
                    "total_slots": total, "n_ctx_per_slot": n_ctx}
        return None

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        return {
            "usage": gauge(samples, "llamacpp:kv_cache_usage_ratio"),
            "running": gauge(samples, "llamacpp:requests_processing"),
            "waiting": gauge(samples, "llamacpp:requests_deferred"),
            "used_tokens": gauge(samples, "llamacpp:kv_cache_tokens"),
        }

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        binary = server_binary() or "llama-server"
        extra = [] if "--metrics" in args else ["--metrics"]
        return [binary, "--model", model, "--host", host, "--port", str(port), *extra, *args]

    def check_installed(self) -> str | None:
        if server_binary() is None:
            return f"llama.cpp's llama-server was not found: {self.install_hint}"
        return None

    def installed_version(self) -> str | None:
        binary = server_binary()
        if binary is None:
            return None
        try:
            done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        for line in (done.stderr + "\n" + done.stdout).splitlines():
            if line.startswith("version:"):  # "version: 4589 (1a2b3c4)"
                return line.split(":", 1)[1].strip()
        return None
