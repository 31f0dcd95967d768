"""One streaming request through Locust's ``HttpSession`` (requests), timed per chunk.

During the stream the only per-chunk work is ``reads.append((time(), chunk))``; parsing happens after the
stream ends (``cardgen.load.sse``). The request is reported once, when it ends, through Locust's
``request`` event with the finished :class:`~cardgen.schemas.records.RequestRecord` in ``context["record"]``:
Locust's stats and cardgen's record sink both subscribe to that event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from cardgen.load.sse import parse_stream
from cardgen.schemas.records import ErrorKind, RequestRecord

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def build_payload(*, endpoint: str, model: str, prompt: str, output_tokens: int) -> dict[str, Any]:
    """An OpenAI-style streaming request that forces exactly ``output_tokens`` tokens."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _classify(exc: BaseException) -> ErrorKind:
    if isinstance(exc, requests.Timeout | ReadTimeoutError | TimeoutError):
        return ErrorKind.TIMEOUT
    return ErrorKind.STREAM_DROPPED


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:200]


def stream_once(session: Any, *, endpoint: str, payload: dict[str, Any], record: dict[str, Any],
                timeout_s: float, connect_timeout_s: float = 10.0,
                on_text: Callable[[str], None] | None = None) -> RequestRecord:
    """Send one streaming request and return its record (never raises for a server or network fault).

    ``record`` holds the point fields of the RequestRecord (scenario, kind, targets, ...); this adds timing,
    usage and errors. ``session`` is a Locust ``HttpSession``.
    """
    now = time.time
    reads: list[tuple[float, bytes]] = []
    append = reads.append
    status: int | None = None
    headers_at: float | None = None
    error: str | None = None
    kind: ErrorKind | None = None
    sent_at = now()
    deadline = sent_at + timeout_s
    with session.post(PATHS[endpoint], json=payload, stream=True, catch_response=True, name=record["scenario"],
                      timeout=(connect_timeout_s, timeout_s)) as resp:
        headers_at = now()
        failure = getattr(resp, "error", None)
        status = resp.status_code or None
        if failure is not None and not status:
            headers_at = None
            kind = ErrorKind.TIMEOUT if isinstance(failure, requests.Timeout) else ErrorKind.CONNECT
            error = _short(failure)
        elif status != 200:
            kind = ErrorKind.HTTP_STATUS
            try:
                body = resp.text[:160]
            except requests.RequestException:
                body = ""
            error = f"HTTP {status}: {' '.join(body.split())}".strip()
        else:
            try:
                for chunk in resp.iter_content(chunk_size=None):
                    append((now(), chunk))
                    if reads[-1][0] > deadline:
                        kind, error = ErrorKind.TIMEOUT, f"stream exceeded the {timeout_s:g} s request timeout"
                        break
            except (requests.RequestException, ProtocolError, OSError) as exc:
                kind, error = _classify(exc), _short(exc)
        end_at = now()
        parsed = parse_stream(reads)
        if on_text is not None:  # after the stream: a caller that needs the reply (chat history) gets it
            on_text(parsed.text)
        if kind is None:
            if parsed.server_error is not None:
                kind, error = ErrorKind.SERVER_ERROR_EVENT, f"error event: {parsed.server_error}"
            elif parsed.malformed is not None:
                kind, error = ErrorKind.MALFORMED_SSE, f"malformed event: {parsed.malformed!r}"
            elif not parsed.done:
                kind, error = ErrorKind.STREAM_DROPPED, "stream ended before data: [DONE]"
            elif not parsed.chunk_times and not (parsed.output_tokens and parsed.silent_times):
                kind, error = ErrorKind.EMPTY, "stream carried no text"
        rec = RequestRecord(
            **record,
            sent_at=sent_at,
            headers_at=headers_at,
            # no text at all but the server counted tokens (e.g. 1 special token): its chunk's arrival is the
            # first token
            first_token_at=parsed.first_token_at or (parsed.silent_times[0] if parsed.silent_times else None),
            chunk_times=parsed.chunk_times,
            end_at=end_at,
            response_id=parsed.response_id,
            status=status,
            prompt_tokens=parsed.prompt_tokens,
            output_tokens=parsed.output_tokens,
            finish_reason=parsed.finish_reason,
            error=error,
            error_kind=kind,
        )
        meta = resp.request_meta
        meta["response_time"] = (end_at - sent_at) * 1000.0
        meta["response_length"] = sum(len(c) for _, c in reads)
        meta["context"] = {**(meta.get("context") or {}), "record": rec}
        if error is None:
            resp.success()
        else:
            resp.failure(error)
    return rec
