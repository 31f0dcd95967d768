"""The server's ``/metrics`` scrapes as a time series, whatever the engine calls things.

Columns of :func:`server_timeseries`: ``t`` (Unix seconds, the middle of the scrape), ``kv_usage`` (fraction
0..1), ``running``, ``waiting``, ``preemptions`` (a counter). A gauge the server does not publish is NaN.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cardgen.records import MetricSample

# candidate sample names, first present wins (newest names first)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
           "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
VLLM_CACHE_CONFIG = "vllm:cache_config_info"
TGI_MAX_TOTAL_TOKENS = "tgi_batch_max_total_tokens"

COLUMNS = ("t", "kv_usage", "running", "waiting", "preemptions")


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _values(sample: MetricSample, names: Sequence[str]) -> list[float]:
    for name in names:
        found = sample.samples.get(name)
        if found:
            return [_float(s.get("value")) if isinstance(s, dict) else np.nan for s in found]
    return []


def _combine(values: list[float], how: Any) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(how(finite)) if finite else np.nan


def server_timeseries(samples: Iterable[MetricSample]) -> pd.DataFrame:
    """One row per successful scrape, in time order. Counts are summed over label sets (engines, models);
    the KV usage fraction is averaged over them."""
    rows = []
    for s in samples:
        if s.error is not None or not s.samples:
            continue
        usage = _values(s, KV_USAGE)
        running = _values(s, RUNNING)
        waiting = _values(s, WAITING)
        pre = _values(s, PREEMPTIONS)
        rows.append({
            "t": (s.t + s.t_end) / 2 if s.t_end is not None else s.t,
            "kv_usage": _combine(usage, np.mean),
            "running": _combine(running, np.sum),
            "waiting": _combine(waiting, np.sum),
            "preemptions": _combine(pre, np.sum),
        })
    df = pd.DataFrame(rows, columns=list(COLUMNS), dtype=float)
    return df.sort_values("t", kind="stable").reset_index(drop=True)


def window(ts: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """The scrapes taken between ``start`` and ``end`` (inclusive)."""
    if ts.empty:
        return ts
    return ts[(ts["t"] >= start) & (ts["t"] <= end)]


def counter_increase(ts: pd.DataFrame, column: str, start: float, end: float) -> float | None:
    """How much a counter rose between the last scrape at or before ``start`` (or the first after it) and the
    last scrape at or before ``end``. None when the server does not publish it."""
    if ts.empty or ts[column].isna().all():
        return None
    valid = ts[ts[column].notna()]
    t = valid["t"].to_numpy()
    v = valid[column].to_numpy()
    i0 = max(int(np.searchsorted(t, start, side="right")) - 1, 0)
    i1 = int(np.searchsorted(t, end, side="right")) - 1
    if i1 < i0:
        return 0.0
    return float(max(v[i1] - v[i0], 0.0))


def _as_int(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if np.isfinite(number) and number > 0 else None


def cache_config(samples: Sequence[MetricSample]) -> dict[str, str]:
    """The labels of vLLM's ``cache_config_info`` from the last scrape that has it (empty when hidden)."""
    for s in reversed(samples):
        found = s.samples.get(VLLM_CACHE_CONFIG)
        if found:
            return {str(k): str(v) for k, v in (found[0].get("labels") or {}).items()}
    return {}


def block_size(config: dict[str, str]) -> int | None:
    """Tokens per KV block, when the server says."""
    return _as_int(config.get("block_size"))


def configured_kv_tokens(samples: Sequence[MetricSample], server_extra: dict[str, Any] | None,
                         ) -> tuple[float, str] | None:
    """The KV capacity the server declares, in tokens, and where it was read:

    - vLLM ``cache_config_info``: ``kv_cache_size_tokens``, else ``num_gpu_blocks`` x ``block_size``;
    - TGI: the gauge ``tgi_batch_max_total_tokens``;
    - llama.cpp: ``total_slots`` x ``default_generation_settings.n_ctx`` from ``/props`` (run.json server.extra).
    """
    config = cache_config(samples)
    tokens = _as_int(config.get("kv_cache_size_tokens"))
    if tokens:
        return float(tokens), "vllm:cache_config_info kv_cache_size_tokens"
    blocks, size = _as_int(config.get("num_gpu_blocks")), _as_int(config.get("block_size"))
    if blocks and size:
        return float(blocks * size), "vllm:cache_config_info num_gpu_blocks x block_size"
    for s in reversed(samples):
        tgi = _as_int(s.value(TGI_MAX_TOTAL_TOKENS))
        if tgi:
            return float(tgi), "TGI gauge tgi_batch_max_total_tokens"
    extra = server_extra or {}
    props = extra.get("props") if isinstance(extra.get("props"), dict) else extra
    slots = _as_int(props.get("total_slots"))
    settings = props.get("default_generation_settings")
    n_ctx = _as_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if slots and n_ctx:
        return float(slots * n_ctx), "llama.cpp /props total_slots x n_ctx"
    return None
