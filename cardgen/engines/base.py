"""What every engine adapter knows, and the small helpers they share for reading ``/metrics`` samples.

An adapter is plain knowledge about one inference server: how to recognise it, where it says its version and
KV-cache capacity, which gauges say how loaded it is, and how to start it. No I/O happens here except through
the :class:`Fetch` a caller hands in (``detect.probe`` does, with ``requests``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cardgen.engines.lora import LoraModule
from cardgen.errors import UsageError
from cardgen.points import Point
from cardgen.promtext import parse_metrics

Samples = Mapping[str, list[Any]]  # a dict, or a scrape read back (its samples made when asked for)

@dataclass(frozen=True)
class Fetch:
    """How an adapter reads a server while it is being identified: ``json(path)`` and ``text(path)`` return
    the parsed body of a 200 answer, or None for anything else (404, refused, not JSON...)."""

    json: Callable[[str], Any]
    text: Callable[[str], str | None]


def samples_of(sample: Any) -> Samples:
    """The ``{sample name: [{"labels", "value"}]}`` table from whatever a caller holds: a
    ``records.MetricSample``, its JSON dict (with ``samples``), the table itself, or Prometheus text."""
    if sample is None:
        return {}
    if isinstance(sample, str):
        return parse_metrics(sample)
    inner = getattr(sample, "samples", None)
    if isinstance(inner, Mapping):  # a dict, or a scrape read back (cardgen.schemas.records.Samples)
        return inner
    if isinstance(sample, Mapping):
        if isinstance(sample.get("samples"), Mapping):
            return dict(sample["samples"])
        return dict(sample)
    raise TypeError(f"cannot read metric samples from {type(sample).__name__}")


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def gauge(samples: Samples, name: str, *, how: str = "sum") -> float | None:
    """The value of ``name`` across its label sets (``sum``, ``mean`` or ``max``); None when absent."""
    values = [v for v in (_number(s.get("value")) for s in samples.get(name, ())) if v is not None]
    if not values:
        return None
    if how == "mean":
        return sum(values) / len(values)
    if how == "max":
        return max(values)
    return sum(values)


def first_gauge(samples: Samples, *names: str, how: str = "sum") -> float | None:
    """The first of ``names`` that is present."""
    for name in names:
        value = gauge(samples, name, how=how)
        if value is not None:
            return value
    return None


def labels_of(samples: Samples, name: str) -> dict[str, str] | None:
    """The labels of the first sample of ``name`` (info-style gauges carry their data in labels)."""
    for sample in samples.get(name, ()):
        labels = sample.get("labels")
        if isinstance(labels, Mapping):
            return {str(k): str(v) for k, v in labels.items()}
    return None


def mapping_at(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` where it is a mapping (a JSON object), else an empty one."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def as_int(value: Any) -> int | None:
    """``value`` as an int when it is a whole positive-or-zero number ("262144", 262144.0); else None
    (vLLM writes unset fields as the string "None")."""
    number = _number(value)
    if number is None or number < 0 or number != int(number):
        return None
    return int(number)


class EngineAdapter:
    """Knowledge about one engine. Subclasses override what differs; the defaults fit a plain
    OpenAI-compatible server that says nothing about itself."""

    name: str = "openai-compatible"
    label: str = "OpenAI-compatible server"
    health_path: str = "/health"
    launchable: bool = False
    install_hint: str = ""
    #: whether the command line of a server on this host is read (``ServerInfo.extra["process"]``): the engine's
    #: endpoints do not say all the adapter needs (llama.cpp's unified KV cache)
    reads_process: bool = False
    #: the engine setting that usually causes a part of the time to first token to dominate, by part (``queue``,
    #: ``other_server``, ``network_client``, ``outside_engine``: :mod:`cardgen.analysis.timebudget`), in words
    time_hints: Mapping[str, str] = {
        "network_client": "the network between client and server, or a load generator short of CPU (the card's "
                          "client column says whether it kept up)",
    }
    #: whether the server runs a fixed number of requests at once (slots) and queues the rest, whatever its KV
    #: cache holds: a request waiting there waits for a slot (the live saturation check of a watched point)
    bounded_by_slots: bool = False

    # --- recognising a running server -------------------------------------------------------------
    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        """What this engine's own endpoints say (stored in ``ServerInfo.extra``) when the server is this
        engine; None when it is not. ``version`` is ``/version`` as already read (or None)."""
        return None

    def read_extra(self, fetch: Fetch, version: Any) -> dict[str, Any]:
        """Like :meth:`identify` but for an engine the user named (``--engine``): read what can be read."""
        return self.identify(fetch, version) or {}

    def server_version(self, extra: Mapping[str, Any], version: Any) -> str | None:
        """The engine's version as the running server reports it."""
        if isinstance(version, Mapping) and version.get("version") is not None:
            return str(version["version"])
        return None

    # --- what a request may be -------------------------------------------------------------------------
    #: the request fields that force the output length, as this engine spells them: ``min_tokens`` (the target)
    #: and ``ignore_eos`` (true). ``cardgen.load.dialect`` tries them on the server and leaves out what it refuses.
    length_fields: tuple[str, ...] = ("min_tokens", "ignore_eos")
    #: fields an ingestion sweep's requests add so that the engine computes the whole prompt (none: its prompts'
    #: unique heads are all that keeps the prefix cache out)
    cold_fields: Mapping[str, Any] = {}

    def context_limit(self, models: Any, extra: Mapping[str, Any], served_model: str | None) -> tuple[int, str] | None:
        """The most tokens one request may hold (prompt + output) and where the server said it: by default the
        served model's ``max_model_len`` in ``/v1/models`` (vLLM, SGLang, the virtual server). None: unknown."""
        data = models.get("data") if isinstance(models, Mapping) else None
        for entry in data if isinstance(data, list) else ():
            if isinstance(entry, Mapping) and entry.get("id") == served_model:
                value = as_int(entry.get("max_model_len"))
                if value:
                    return value, "/v1/models max_model_len"
        return None

    # --- reading /metrics ---------------------------------------------------------------------------
    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        """KV-cache capacity: ``{"tokens": int, "source": str, "block_size": int | None, ...raw fields}``, or
        None when unknown. ``source`` names what was read, in words a card can show; ``block_size`` is the
        tokens per KV block or page when the engine says (the analysis rounds resident tokens up to it)."""
        return None

    def slot_limit(self, extra: Mapping[str, Any]) -> int | None:
        """How many requests the server runs at once at most, when it has a fixed number of slots; None when it
        admits requests while its KV cache has room."""
        return None

    def kv_unknown(self, extra: Mapping[str, Any]) -> str | None:
        """Why the server's KV capacity cannot be read although the engine has one to read (a card names it);
        None when :meth:`kv_config` answers, or the engine never says."""
        return None

    def scheduler_settings(self, samples: Samples, extra: Mapping[str, Any], launch: Mapping[str, Any] | None, *,
                           version: str | None = None, device: str | None = None) -> dict[str, tuple[Any, str]]:
        """What the server's scheduler is set to, as far as it says: ``{setting: (value, where it was read)}`` for
        ``kv_capacity_tokens``, ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens`` and ``chunked_prefill``
        (a calibration reads them instead of fitting them). ``launch`` is run.json's ``server.launch`` when cardgen
        started the engine; ``version`` the engine's; ``device`` what it runs on as far as the caller knows (``cpu``,
        ``large-gpu``: 70 GiB or more and not an A100, ``gpu``), for engines whose defaults depend on it. The default
        reads the KV cache's capacity and block size (:meth:`kv_config`); a setting the engine does not say is
        left out."""
        out: dict[str, tuple[Any, str]] = {}
        kv = self.kv_config(samples, extra)
        if kv:
            out["kv_capacity_tokens"] = (int(kv["tokens"]), str(kv["source"]))
            if kv.get("block_size"):
                out["block_size"] = (int(kv["block_size"]), str(kv["source"]))
        return out

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        """How loaded the server is right now: ``usage`` (KV cache, 0..1), ``running`` and ``waiting``
        requests, and ``used_tokens`` where the engine exposes it. None for what it does not say."""
        return {"usage": None, "running": None, "waiting": None, "used_tokens": None}

    #: Prometheus names of the server's own counters and histograms: keys ``prompt_tokens``,
    #: ``generation_tokens``, ``requests``, ``preemptions`` (counters, sample names as exposed) and ``ttft``,
    #: ``itl``, ``e2e``, ``queue`` (histogram base names, without ``_bucket``/``_sum``/``_count``); prefix cache:
    #: ``prefix_cache_queries`` / ``prefix_cache_hits`` (counters of prompt tokens looked up / found) or
    #: ``prefix_cache_hit_rate`` (a gauge, 0..1). llama.cpp reports cached tokens per response only
    #: (``timings.cache_n``), not in ``/metrics``. Speculative decoding: counters ``spec_drafts``,
    #: ``spec_draft_tokens``, ``spec_accepted_tokens`` and ``spec_accepted_per_pos`` (labelled ``position``), or
    #: gauges ``spec_accept_length`` (tokens per verify step, bonus included) and ``spec_accept_rate``.
    metric_names: Mapping[str, str] = {}
    #: what older versions of the engine called the same things, tried in order after :attr:`metric_names`
    older_metric_names: Mapping[str, tuple[str, ...]] = {}

    # --- launching ----------------------------------------------------------------------------------
    def launch_command(self, model: str, host: str, port: int, args: list[str]) -> list[str]:
        raise NotImplementedError(f"cardgen cannot start {self.label}")

    def launch_defaults(self, points: Sequence[Point], args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """Arguments cardgen adds when it starts the engine for ``points`` (those ``args`` does not set already),
        and why each was chosen, by flag (run.json ``server.launch.chosen`` and the card say it). None by default."""
        return [], {}

    def lora_args(self, modules: Sequence[LoraModule]) -> list[str]:
        """The engine's flags that serve ``modules`` (LoRA adapters), every one of them in the same batches."""
        raise UsageError(f"cardgen cannot serve LoRA adapters with {self.label}: start it yourself and give --url")

    def check_installed(self) -> str | None:
        """None when the engine can be started here; else a one-line reason with how to install it."""
        return f"cardgen cannot start {self.label}"

    def installed_version(self) -> str | None:
        """The version of the engine cardgen would start (None when it cannot tell)."""
        return None

    def default_env(self) -> dict[str, str]:
        """Environment variables set (unless the caller sets them) when cardgen starts the engine."""
        return {}

    def config_from_log(self, log_text: str) -> dict[str, Any]:
        """What the engine printed about its own configuration at start-up (``non_default_args``, the resolved
        ``config`` table...), read from its log once it is healthy. Empty when it prints nothing useful."""
        return {}


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes: ``"a=1, b=[2, 3], c='x,y'"`` -> 3 parts."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]
