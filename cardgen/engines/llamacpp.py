"""llama.cpp ``llama-server``: ``/props`` (``total_slots``, ``default_generation_settings.n_ctx``, ``build_info``),
``/slots`` (per slot ``n_ctx``), ``/v1/models`` (``data[].meta.n_ctx``), ``/metrics`` only with ``--metrics``.

Slots and the KV cache. A server with N slots gives each slot a context of ``n_ctx`` tokens (what ``/props``,
``/slots`` and ``/v1/models`` all say), and that is the longest request it takes (prompt + output; longer prompts get
HTTP 400 ``exceed_context_size_error``). How much KV cache that means depends on a setting none of those
endpoints states: with ``-np N`` each slot has a cache of its own (N x ``n_ctx`` tokens); with one unified cache
(``--kv-unified``, or ``-np`` left out: 4 slots sharing one pool) every slot reports the whole pool (``n_ctx``
tokens in all). So the layout is read from what the server said at start-up (its log: ``initializing, n_slots = N,
n_ctx_slot = C, kv_unified = 'false'``) or from its command line and environment (``-np``, ``-kvu``,
``LLAMA_ARG_*``: the process listening on the port, when it runs on this host); where neither can be had, the
capacity is unknown and the card says why.

``/metrics``: ``llamacpp:prompt_tokens_total`` (cached tokens excluded) and ``prompt_tokens_cached_total``,
``tokens_predicted_total`` (counted when a request ends), ``requests_processing``, ``requests_deferred``,
``spec_decode_*``; no KV-usage gauge (``kv_cache_usage_ratio`` and ``kv_cache_tokens`` of older builds are read if
present). Values are printed with 6 significant digits: per-request ``usage`` and ``timings`` are exact, so the
figures come from those.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from cardgen.engines.base import EngineAdapter, Fetch, Samples, as_int, gauge
from cardgen.points import Point

BINARY_ENV = "CARDGEN_LLAMA_SERVER"  # path to llama-server when it is not on PATH
AUTO_SLOTS = 4  # what -np left out (or -np -1) gives: 4 slots sharing one unified cache

_INIT = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")
_CTX = re.compile(r"llama_context: n_ctx\s+= (\d+)")
_TRUE = ("1", "true", "on", "yes", "enabled")


def server_binary() -> str | None:
    path = os.environ.get(BINARY_ENV)
    if path:
        return path if os.access(path, os.X_OK) else None
    return shutil.which("llama-server")


def _flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last of ``names`` on a command line (``-np 4`` or ``--parallel=4``); None when absent."""
    found = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in names:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def _has(args: Sequence[str], *names: str) -> bool:
    return any(a in names for a in args)


def layout_from_command(args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """What a llama-server command line (and its ``LLAMA_ARG_*`` environment) sets of its slots: ``parallel``
    (None: auto), ``unified`` and ``ctx`` (``-c``) where given, ``per_slot_cap`` (``--kv-unified-per-slot``)."""
    parallel = _flag_value(args, "-np", "--parallel") or env.get("LLAMA_ARG_N_PARALLEL")
    n_parallel = int(parallel) if parallel is not None and parallel.lstrip("-").isdigit() else None
    if _has(args, "-kvu", "--kv-unified"):
        unified: bool | None = True
    elif _has(args, "-no-kvu", "--no-kv-unified"):
        unified = False
    elif env.get("LLAMA_ARG_KV_UNIFIED") is not None:
        unified = env["LLAMA_ARG_KV_UNIFIED"].strip().lower() in _TRUE
    else:
        unified = None
    if n_parallel is None or n_parallel < 0:  # auto: 4 slots, one unified cache (unless told otherwise)
        n_parallel = AUTO_SLOTS
        unified = True if unified is None else unified
    elif unified is None:
        unified = False
    ctx = _flag_value(args, "-c", "--ctx-size") or env.get("LLAMA_ARG_CTX_SIZE")
    cap = _flag_value(args, "--kv-unified-per-slot") or env.get("LLAMA_ARG_KV_UNIFIED_PER_SLOT")
    return {"parallel": n_parallel, "unified": unified,
            "ctx": int(ctx) if ctx and ctx.isdigit() else None,
            "per_slot_cap": int(cap) if cap and cap.isdigit() else None}


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    label = "llama.cpp server"
    launchable = True
    reads_process = True
    bounded_by_slots = True
    install_hint = (f"build llama.cpp's 'llama-server' (tests/engines/build_llamacpp.sh does, from the llama-cpp-python "
                    f"sdist) and put it on PATH or set {BINARY_ENV}=/path/to/llama-server")
    metric_names = {
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "requests": "",
        "ttft": "",
        "itl": "",
        "e2e": "",
        "queue": "",
        "spec_drafts": "llamacpp:spec_decode_num_drafts_total",
        "spec_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "spec_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        "spec_accepted_per_pos": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    }
    time_hints = {
        "outside_engine": "llama.cpp's host-memory prompt cache (--cache-ram, on by default) saving and restoring slot "
                          "states before a prompt is computed: --cache-ram 0 turns it off",
        "queue": "requests waiting for a free slot (-np)",
        "network_client": EngineAdapter.time_hints["network_client"],
    }
    length_fields = ("ignore_eos",)  # honoured; min_tokens is not
    cold_fields = {"cache_prompt": False}  # compute the whole prompt: no reuse of a slot's cached prefix

    def identify(self, fetch: Fetch, version: Any) -> dict[str, Any] | None:
        props = fetch.json("/props")
        if not isinstance(props, Mapping):
            return None
        if "default_generation_settings" not in props and "total_slots" not in props:
            return None
        extra: dict[str, Any] = {"props": _props_kept(props)}
        slots = fetch.json("/slots")  # 501 when started with --no-slots
        if isinstance(slots, list):
            extra["slots"] = [{k: s.get(k) for k in ("id", "n_ctx", "speculative")} for s in slots
                              if isinstance(s, Mapping)]
        return extra

    def server_version(self, extra: Mapping[str, Any], version: Any) -> str | None:
        props = extra.get("props") or {}
        return str(props["build_info"]) if props.get("build_info") else None

    # -- context and slots ---------------------------------------------------------------------------------
    def context_limit(self, models: Any, extra: Mapping[str, Any], served_model: str | None) -> tuple[int, str] | None:
        data = models.get("data") if isinstance(models, Mapping) else None
        for entry in data if isinstance(data, list) else ():
            meta = entry.get("meta") if isinstance(entry, Mapping) else None
            n_ctx = as_int(meta.get("n_ctx")) if isinstance(meta, Mapping) else None
            if n_ctx:
                return n_ctx, "/v1/models data[].meta.n_ctx (the context of one slot)"
        n_ctx = as_int(((extra.get("props") or {}).get("default_generation_settings") or {}).get("n_ctx"))
        if n_ctx:
            return n_ctx, "/props default_generation_settings.n_ctx (the context of one slot)"
        slots = extra.get("slots") or []
        n_ctx = as_int(slots[0].get("n_ctx")) if slots and isinstance(slots[0], Mapping) else None
        if n_ctx:
            return n_ctx, "/slots n_ctx (the context of one slot)"
        return None

    def slots(self, extra: Mapping[str, Any]) -> tuple[int | None, int | None]:
        """The server's slots and each slot's context, as ``/props`` and ``/slots`` say."""
        props = extra.get("props") or {}
        slots = [s for s in extra.get("slots") or () if isinstance(s, Mapping)]
        count = as_int(props.get("total_slots")) or (len(slots) or None)
        n_ctx = (as_int(slots[0].get("n_ctx")) if slots else None) or \
            as_int((props.get("default_generation_settings") or {}).get("n_ctx"))
        return count, n_ctx

    def slot_limit(self, extra: Mapping[str, Any]) -> int | None:
        return self.slots(extra)[0]

    def layout(self, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        """Whether the slots share one cache, and what says so: the server's start-up log, else its command line
        and environment; None when neither is known."""
        log = extra.get("log") or {}
        if isinstance(log.get("kv_unified"), bool):
            return {"unified": log["kv_unified"], "source": "the server's log (initializing ... kv_unified)",
                    "pool": None, "per_slot_cap": None}
        process = extra.get("process") or {}
        command = process.get("command")
        if isinstance(command, list) and command:
            said = layout_from_command([str(a) for a in command[1:]], process.get("env") or {})
            return {"unified": said["unified"], "pool": said["ctx"], "per_slot_cap": said["per_slot_cap"],
                    "source": f"the server's command line (pid {process.get('pid')})"}
        return None

    def kv_config(self, samples: Samples, extra: Mapping[str, Any]) -> dict[str, Any] | None:
        count, n_ctx = self.slots(extra)
        layout = self.layout(extra)
        if not count or not n_ctx or layout is None:
            return None
        if layout["unified"]:
            pool = n_ctx
            if layout.get("per_slot_cap") and layout.get("pool"):
                pool = int(layout["pool"])
            elif layout.get("per_slot_cap"):
                pool = count * int(layout["per_slot_cap"])
            how = f"{count} slots sharing one cache of {pool:,} tokens"
        else:
            pool = count * n_ctx
            how = f"{count} slots x {n_ctx:,} tokens, a cache per slot"
        return {"tokens": pool, "source": f"/props and /slots: {how} (unified or not: {layout['source']})",
                "total_slots": count, "n_ctx_per_slot": n_ctx, "kv_unified": bool(layout["unified"]),
                "slots": count}

    def kv_unknown(self, extra: Mapping[str, Any]) -> str | None:
        count, n_ctx = self.slots(extra)
        if not count or not n_ctx:
            return "llama.cpp's /props and /slots said nothing of its slots" if not extra.get("props") else None
        if self.layout(extra) is not None:
            return None
        return (f"llama.cpp's /props and /slots say {count} slots of {n_ctx:,} tokens, not whether they share one "
                f"cache ({n_ctx:,} tokens) or each hold their own ({count * n_ctx:,}); the server's command line "
                "could not be read (it does not run on this host) and cardgen did not start it")

    def load_gauges(self, samples: Samples) -> dict[str, float | None]:
        return {
            "usage": gauge(samples, "llamacpp:kv_cache_usage_ratio"),  # older builds only
            "running": gauge(samples, "llamacpp:requests_processing"),
            "waiting": gauge(samples, "llamacpp:requests_deferred"),
            "used_tokens": gauge(samples, "llamacpp:kv_cache_tokens"),  # older builds only
        }

    def config_from_log(self, log_text: str) -> dict[str, Any]:
        """llama-server logs ``initializing, n_slots = N, n_ctx_slot = C, kv_unified = 'false'`` (and, at a higher
        verbosity, ``llama_context: n_ctx = T``)."""
        out: dict[str, Any] = {}
        match = _INIT.search(log_text)
        if match:
            out.update(n_slots=int(match.group(1)), n_ctx_slot=int(match.group(2)),
                       kv_unified=match.group(3) == "true")
        match = _CTX.search(log_text)
        if match:
            out["n_ctx"] = int(match.group(1))
        return out

    # -- launching -----------------------------------------------------------------------------------------
    def launch_defaults(self, points: Sequence[Point], args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """``-np``: a slot for every request the suite keeps in flight at once (its largest parallel count), each
        slot a KV cache of its own (``-np`` given turns llama.cpp's unified cache off); ``-c``: those slots times the
        suite's longest request, rounded up to 256 tokens (llama.cpp gives each slot ``-c`` / ``-np``). A flag
        ``args`` sets is left as given."""
        out: list[str] = []
        chosen: dict[str, str] = {}
        set_np = _flag_value(args, "-np", "--parallel")
        if set_np is None:
            busiest = max(points, key=lambda p: p.users(), default=None)
            slots = busiest.users() if busiest is not None else 1
            out += ["-np", str(slots)]
            chosen["-np"] = (f"{slots}: the suite's largest parallel count ({busiest.name})" if busiest is not None
                             else f"{slots}")
        else:
            slots = int(set_np) if set_np.lstrip("-").isdigit() and int(set_np) > 0 else AUTO_SLOTS
        if _flag_value(args, "-c", "--ctx-size") is None:
            longest = max(points, key=lambda p: p.longest_request(), default=None)
            need = longest.longest_request() if longest is not None else 2048
            per_slot = -(-need // 256) * 256
            total = per_slot * slots  # per slot: each slot gets total / slots; one shared cache holds them all
            out += ["-c", str(total)]
            chosen["-c"] = (f"{total}: {slots} slots x {per_slot} tokens, the suite's longest request "
                            f"({longest.name if longest else 'none'}: {need} tokens) rounded up to 256")
        return out, chosen

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


def _props_kept(props: Mapping[str, Any]) -> dict[str, Any]:
    """``/props`` without what is long and says nothing of performance (the chat template, UI settings)."""
    drop = {"chat_template", "chat_template_tool_use", "ui_settings", "webui_settings"}
    return {k: v for k, v in props.items() if k not in drop}
