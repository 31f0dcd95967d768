"""Ask a server what it is: ``/v1/models``, ``/version`` and friends, and pick the engine.

Plain ``requests`` (no gevent): runs before any load starts.
"""

from __future__ import annotations

from typing import Any

import requests

from cardgen.errors import ServerError
from cardgen.runinfo import ServerInfo


def _get_json(session: requests.Session, url: str, timeout_s: float) -> Any:
    try:
        resp = session.get(url, timeout=timeout_s)
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


def probe(url: str, *, api_key: str | None = None, model: str | None = None, timeout_s: float = 5.0) -> ServerInfo:
    """What the server at ``url`` says about itself. Raises :class:`ServerError` when it cannot be reached."""
    base = url.rstrip("/")
    session = requests.Session()
    if api_key:
        session.headers["Authorization"] = f"Bearer {api_key}"
    try:
        session.get(f"{base}/v1/models", timeout=timeout_s)
    except requests.ConnectionError:
        raise ServerError(f"cannot connect to {base}: is the server running, and is the URL right?") from None
    except requests.Timeout:
        raise ServerError(f"{base} did not answer within {timeout_s:.0f} s") from None
    except requests.RequestException as exc:
        raise ServerError(f"cannot reach {base}: {type(exc).__name__}") from None
    models = _get_json(session, f"{base}/v1/models", timeout_s)
    version = _get_json(session, f"{base}/version", timeout_s)
    served = model
    ids = [m.get("id") for m in (models or {}).get("data", []) if isinstance(m, dict)] if isinstance(models, dict) else []
    if ids and (served is None or served not in ids):
        served = ids[0]
    engine, engine_version = "openai-compatible", None
    if isinstance(version, dict):
        engine_version = str(version.get("version")) if version.get("version") is not None else None
        engine = str(version.get("engine") or ("vllm" if engine_version else engine))
    return ServerInfo(url=base, engine=engine, engine_version=engine_version, served_model=served,
                      models=models, version=version)
