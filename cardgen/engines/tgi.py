"""Hugging Face TGI (text-generation-inference): ``/info``; the KV budget is the ``tgi_batch_max_total_tokens``
gauge (``max_batch_total_tokens`` left ``/info`` in v2.3.0)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int, gauge

LAUNCHER = "text-generation-launcher"


class TgiAdapter(EngineAdapter):
    name = "tgi"
    label = "TGI"
    launchable = True
    install_hint = ("install TGI so that 'text-generation-launcher' is on PATH "
                    "(see huggingface/text-generation-inference: local install or its container image)")
    # counters are exposed without `_total`; the Prometheus parser adds it to the sample name
    metric_names = {
        "prompt_tokens": "tgi_request_input_length_sum",
        "generation_tokens": "tgi_request_generated_tokens_sum",
        "requests": "tgi_request_success_total",
        "ttft": "",  # TGI has no time-to-first-token histogram
        "itl": "tgi_request_mean_time_per_token_duration",
        "e2e": "tgi_request_duration",
        "queue": "tgi_request_queue_duration",
    }

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        info = fetch.json("/info")
        if not isinstance(info, Mapping) or "model_id" not in info:
            return None
        router = str(info.get("router") or "")
        if "embeddings" in router or "model_type" in info:  # TEI answers /info too
            return None
        if not router and "max_total_tokens" not in info:
            return None
        return {"info": dict(info)}

    def read_extra(self, fetch: Fetch, version: Any) -> dict[str, Any]:
        info = fetch.json("/info")
        return {"info": dict(info)} if isinstance(info, Mapping) else {}

    def server_version(self, extra: Mapping[str, Any], version: Any) -> str | None:
        info = extra.get("info") or {}
        return str(info["version"]) if info.get("version") is not None else None

    def context_limit(self, models: Any, extra: Mapping[str, Any], served_model: str | None) -> tuple[int, str] | None:
        tokens = as_int((extra.get("info") or {}).get("max_total_tokens"))
        return (tokens, "/info max_total_tokens") if tokens else None

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        tokens = as_int(gauge(samples, "tgi_batch_max_total_tokens"))
        if tokens:
            return {"tokens": tokens, "source": "tgi_batch_max_total_tokens"}
        info = extra.get("info") or {}
        tokens = as_int(info.get("max_batch_total_tokens"))  # TGI before 2.3.0
        if tokens:
            return {"tokens": tokens, "source": "/info max_batch_total_tokens"}
        return None

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        current = gauge(samples, "tgi_batch_current_max_tokens")
        budget = gauge(samples, "tgi_batch_max_total_tokens")
        usage = current / budget if current is not None and budget else None
        return {
            "usage": usage,  # tokens the running batch may reach / the budget: TGI has no usage gauge
            "running": gauge(samples, "tgi_batch_current_size"),
            "waiting": gauge(samples, "tgi_queue_size"),
            "used_tokens": current,
        }

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        return [LAUNCHER, "--model-id", model, "--hostname", host, "--port", str(port), *args]

    def check_installed(self) -> str | None:
        if shutil.which(LAUNCHER) is None:
            return f"TGI is not installed ('{LAUNCHER}' is not on PATH): {self.install_hint}"
        return None

    def installed_version(self) -> str | None:
        line = _first_line([LAUNCHER, "--version"])  # "text-generation-launcher 2.4.1"
        return line.split()[-1] if line else None


def _first_line(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr or "").strip()
    return text.splitlines()[0].strip() if text else None
