"""Ask a server what it is: ``/v1/models``, ``/version`` and each engine's own endpoints, and pick the engine.

Recognition, most specific first: cardgen's virtual server (``/version`` says ``cardgen-sim``), TGI (``/info``),
llama.cpp (``/props``), SGLang (``/server_info`` or ``/get_server_info``), vLLM (``/version`` and ``vllm:``
metrics); anything else is a plain OpenAI-compatible server. What an engine's endpoints said is kept in
``ServerInfo.extra`` (secrets echoed by a server are masked).

Plain ``requests`` (no gevent): runs before any load starts.
"""

from __future__ import annotations

from typing import Any

import requests

from cardgen.engines.base import Fetch
from cardgen.engines.process import local_process
from cardgen.engines.registry import ADAPTERS, DETECTION_ORDER, engine_name
from cardgen.errors import ServerError
from cardgen.schemas.run import ContextLimit, ServerInfo


def _get(session: requests.Session, url: str, timeout_s: float) -> requests.Response | None:
    try:
        resp = session.get(url, timeout=timeout_s)
    except requests.RequestException:
        return None
    return resp if resp.status_code == 200 else None


def _get_json(session: requests.Session, url: str, timeout_s: float) -> Any:
    resp = _get(session, url, timeout_s)
    if resp is None:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


def _get_text(session: requests.Session, url: str, timeout_s: float) -> str | None:
    resp = _get(session, url, timeout_s)
    return resp.text if resp is not None else None


def _model_ids(models: Any) -> list[str]:
    if not isinstance(models, dict):
        return []
    return [str(m["id"]) for m in models.get("data", []) if isinstance(m, dict) and m.get("id") is not None]


def probe(url: str, *, api_key: str | None = None, model: str | None = None, timeout_s: float = 5.0,
          engine: str | None = None) -> ServerInfo:
    """What the server at ``url`` says about itself. ``engine`` forces the adapter (``--engine``) instead of
    recognising it. Raises :class:`ServerError` when the server cannot be reached, ``UsageError`` for an
    unknown ``engine``."""
    base = url.rstrip("/")
    forced = engine_name(engine) if engine else None
    session = requests.Session()
    if api_key:
        session.headers["Authorization"] = f"Bearer {api_key}"
    try:
        first = session.get(f"{base}/v1/models", timeout=timeout_s)
    except requests.ConnectionError:
        raise ServerError(f"cannot connect to {base}: is the server running, and is the URL right?") from None
    except requests.Timeout:
        raise ServerError(f"{base} did not answer within {timeout_s:.0f} s") from None
    except requests.RequestException as exc:
        raise ServerError(f"cannot reach {base}: {type(exc).__name__}") from None
    try:
        models = first.json() if first.status_code == 200 else None
    except ValueError:
        models = None
    version = _get_json(session, f"{base}/version", timeout_s)
    fetch = Fetch(json=lambda path: _get_json(session, f"{base}{path}", timeout_s),
                  text=lambda path: _get_text(session, f"{base}{path}", timeout_s))

    name, extra = "openai-compatible", {}
    if forced:
        name, extra = forced, ADAPTERS[forced].read_extra(fetch, version)
    else:
        for candidate in DETECTION_ORDER:
            found = ADAPTERS[candidate].identify(fetch, version)
            if found is not None:
                name, extra = candidate, found
                break
    adapter = ADAPTERS[name]

    ids = _model_ids(models)
    served = model
    if ids and (served is None or served not in ids):
        served = ids[0]
    process = local_process(base) if adapter.reads_process else None
    if process is not None:
        extra = {**extra, "process": process}
    limit = adapter.context_limit(models, extra, served)
    return ServerInfo(url=base, engine=name, engine_version=adapter.server_version(extra, version),
                      served_model=served, models=models, version=version, extra=extra,
                      context=ContextLimit(tokens=limit[0], source=limit[1]) if limit else None)
