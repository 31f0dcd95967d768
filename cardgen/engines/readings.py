"""Pure readings of engine metrics: a scrape (``server_metrics.jsonl`` sample) plus ``ServerInfo.extra`` in,
plain numbers out. No I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from cardgen.engines.base import Samples, gauge, samples_of
from cardgen.engines.registry import get_adapter


def kv_config(engine: str | None, sample: Any, server_extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """KV-cache capacity as the engine reports it: ``{"tokens": int, "source": str, "block_size": int | None,
    ...raw fields}``, or None.

    ``sample`` is one scrape (a ``MetricSample``, its JSON dict, its ``samples`` table or Prometheus text);
    ``server_extra`` is ``ServerInfo.extra`` (llama.cpp's ``/slots``, SGLang's ``/server_info``...).
    Sources: vLLM ``vllm:cache_config_info`` ``kv_cache_size_tokens`` (else ``num_gpu_blocks`` x
    ``block_size``); TGI ``tgi_batch_max_total_tokens``; SGLang ``sglang:max_total_num_tokens`` (else
    ``/server_info``); llama.cpp slots x ``n_ctx``.
    """
    return get_adapter(engine).kv_config(samples_of(sample), server_extra or {})


def kv_unknown(engine: str | None, server_extra: Mapping[str, Any] | None) -> str | None:
    """Why the engine's KV capacity could not be read, when it has one to read (llama.cpp whose slots may or may
    not share one cache); None otherwise."""
    return get_adapter(engine).kv_unknown(server_extra or {})


def time_hints(engine: str | None) -> dict[str, str]:
    """The engine setting that usually causes each part of the time to first token to dominate, in words."""
    return dict(get_adapter(engine).time_hints)


def slot_limit(engine: str | None, server_extra: Mapping[str, Any] | None) -> int | None:
    """How many requests the server runs at once at most, when a fixed number of slots says so (llama.cpp's
    ``total_slots``); None when the KV cache or a batch setting decides it."""
    return get_adapter(engine).slot_limit(server_extra or {})


def load_gauges(engine: str | None, sample: Any) -> dict[str, float | None]:
    """``{"usage": 0..1 | None, "running": n | None, "waiting": n | None, "used_tokens": n | None}``."""
    return get_adapter(engine).load_gauges(samples_of(sample))


def metric_names(engine: str | None) -> dict[str, str]:
    """Sample names of the engine's counters (``prompt_tokens``, ``generation_tokens``, ``requests``,
    ``preemptions``) and base names of its histograms (``ttft``, ``itl``, ``e2e``, ``queue``...); "" or no key
    for what the engine lacks."""
    return dict(get_adapter(engine).metric_names)


def metric_candidates(engine: str | None, role: str) -> tuple[str, ...]:
    """The names a ``role`` of :func:`metric_names` may have on this engine's server, newest first (vLLM's
    inter-token histogram had another name before 0.9); empty when the engine has no such metric."""
    adapter = get_adapter(engine)
    names = (adapter.metric_names.get(role, ""), *adapter.older_metric_names.get(role, ()))
    return tuple(dict.fromkeys(n for n in names if n))


def counter(sample: Any, name: str) -> float | None:
    """A counter's value summed over its label sets (``vllm:generation_tokens_total``...)."""
    return gauge(samples_of(sample), name) if name else None


def first_counter(sample: Any, names: Sequence[str]) -> float | None:
    """The first of ``names`` (from :func:`metric_candidates`) that the scrape has, summed over label sets."""
    samples = samples_of(sample)
    return next((v for v in (gauge(samples, n) for n in names if n) if v is not None), None)


def histogram(sample: Any, name: str) -> dict[str, Any] | None:
    """Histogram ``name`` summed over its label sets: ``{"buckets": [[le, cumulative count], ...], "sum",
    "count"}`` with ``le`` a float (``inf`` last); None when the scrape has no such histogram."""
    samples: Samples = samples_of(sample)
    buckets: dict[float, float] = {}
    for s in samples.get(f"{name}_bucket", ()):
        try:
            le = float(s["labels"]["le"])
        except (KeyError, TypeError, ValueError):
            continue
        buckets[le] = buckets.get(le, 0.0) + float(s.get("value") or 0.0)
    if not buckets:
        return None
    total = sum(float(s.get("value") or 0.0) for s in samples.get(f"{name}_sum", ()))
    count = sum(float(s.get("value") or 0.0) for s in samples.get(f"{name}_count", ()))
    return {"buckets": [[le, buckets[le]] for le in sorted(buckets)], "sum": total, "count": count}


def histogram_delta(before: Any, after: Any, name: str) -> dict[str, Any] | None:
    """What histogram ``name`` gained between two scrapes (the requests of one run), same shape as
    :func:`histogram`, plus ``mean``. ``before`` may be None (a server started for this run)."""
    end = histogram(after, name)
    if end is None:
        return None
    start = histogram(before, name) if before is not None else None
    base = {le: c for le, c in start["buckets"]} if start else {}
    buckets = [[le, c - base.get(le, 0.0)] for le, c in end["buckets"]]
    total = end["sum"] - (start["sum"] if start else 0.0)
    count = end["count"] - (start["count"] if start else 0.0)
    return {"buckets": buckets, "sum": total, "count": count, "mean": total / count if count > 0 else None}


def histogram_quantile(hist: Mapping[str, Any], q: float) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding quantile ``q``."""
    buckets = hist.get("buckets") or []
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le  # above the last finite bound: the bound is all that is known
            if count == prev_count:
                return float(le)
            return float(prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count))
        prev_le, prev_count = le, count
    return prev_le


def labelled_counter(sample: Any, name: str, label: str) -> dict[str, float]:
    """A counter's value per value of ``label``, summed over the other labels (vLLM's accepted tokens per draft
    position: ``{"0": 812.0, "1": 540.0, ...}``); empty when the scrape has none."""
    out: dict[str, float] = {}
    for s in samples_of(sample).get(name, ()) if name else ():
        key = (s.get("labels") or {}).get(label)
        try:
            value = float(s.get("value", math.nan))  # none: NaN, left out below
        except (TypeError, ValueError):
            continue
        if key is not None and not math.isnan(value):
            out[str(key)] = out.get(str(key), 0.0) + value
    return out
