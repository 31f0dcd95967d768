"""A server URL as the command line takes it: checked without importing anything that talks to a server (a load
over HTTP imports Locust, which patches ``ssl``, before anything else), so bad input is a one-line error before
any heavy module loads."""

from __future__ import annotations

from urllib.parse import urlparse

from cardgen.errors import UsageError


def check_url(url: str) -> str:
    """The base URL without a trailing slash or ``/v1``; a one-line UsageError when it is not an http(s) URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"'{url}' is not a server URL: give one like http://127.0.0.1:8000")
    try:
        _ = parsed.port
    except ValueError:
        raise UsageError(f"'{url}' has an invalid port") from None
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base
