"""Inference engines: recognise a running server, read what its ``/metrics`` says, and start one.

Public API (pure functions take what is already on disk: a ``server_metrics.jsonl`` sample and
``run.json``'s ``server.extra``):

- :func:`probe` -- ask a server what it is (``cardgen.engines.detect``); returns a ``ServerInfo``.
- :func:`launched_engine` -- start vLLM, SGLang, TGI or llama.cpp as a child process, wait for health, stop it.
- :func:`kv_config` -- KV-cache capacity in tokens with where it came from, or None.
- :func:`load_gauges` -- KV usage (0..1), running and waiting requests at one scrape.
- :func:`metric_names` -- the engine's own token counters and latency histograms, by role;
  :func:`metric_candidates` adds the names older versions used; :func:`counter` reads one counter from a scrape,
  :func:`first_counter` the first of several names, :func:`labelled_counter` one counter per value of a label.
- :func:`histogram`, :func:`histogram_delta`, :func:`histogram_quantile` -- Prometheus histograms as plain data
  (the server-vs-client latency comparison).
- :func:`get_adapter`, :func:`engine_name` -- the adapter behind a name (aliases: ``llama.cpp``, ``openai``...).

The tiny test model is ``cardgen.engines.tinymodel.make_tiny_model`` (imports torch only when it makes one).
"""

from __future__ import annotations

from cardgen.engines.base import EngineAdapter
from cardgen.engines.detect import probe
from cardgen.engines.launch import LaunchedEngine, launched_engine
from cardgen.engines.readings import (
    counter,
    first_counter,
    histogram,
    histogram_delta,
    histogram_quantile,
    kv_config,
    kv_unknown,
    labelled_counter,
    load_gauges,
    metric_candidates,
    metric_names,
    slot_limit,
    time_hints,
)
from cardgen.engines.registry import ADAPTERS, ENGINES, LAUNCHABLE, engine_name, get_adapter

__all__ = [
    "ADAPTERS", "ENGINES", "LAUNCHABLE", "EngineAdapter", "LaunchedEngine", "counter", "engine_name",
    "first_counter", "get_adapter", "histogram", "histogram_delta", "histogram_quantile", "kv_config", "kv_unknown",
    "labelled_counter", "launched_engine", "load_gauges", "metric_candidates", "metric_names", "probe", "slot_limit", "time_hints",
]
