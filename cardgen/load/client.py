"""One streaming request on a :class:`~cardgen.load.transport.Connection`, timed per network read.

During the stream the only per-read work is stamping the read and keeping its bytes (``cardgen.load.transport``);
the chunked framing and the SSE are undone after the stream ends (``cardgen.load.sse``), once the event loop is
idle: stamping the other streams' reads comes first. The request is reported
once, when it ends, through Locust's ``request`` event (``report``) with the finished
:class:`~cardgen.schemas.records.RequestRecord` in ``context["record"]``: Locust's stats and cardgen's record sink
both subscribe to that event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gevent
from gevent.lock import Semaphore

from cardgen.kinds.shape import Answer
from cardgen.load.reasoning import counted, needs_tokenize, tokenize_reasoning
from cardgen.load.sse import StreamResult, parse_stream
from cardgen.load.transport import SENDS, Connection, Exchange, body_reads, body_text
from cardgen.outcome import RequestFigures
from cardgen.schemas.records import EngineTimings, ErrorKind, RequestRecord

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class RequestFailed(Exception):
    """What Locust's statistics are told when a request failed (the record says more)."""


#: the fields that force a request's output length when the run agreed none (a run made before cardgen asked)
LENGTH_FIELDS = ("min_tokens", "ignore_eos")
NO_EOS_CONFIG = '{"eos_token_id": -1}'  # transformers serve: a per-request generation config without an EOS token


def length_values(names: Sequence[str], *, output_tokens: int) -> dict[str, Any]:
    """The length-forcing fields ``names`` for a request of ``output_tokens`` tokens: vLLM's ``min_tokens`` (the
    target) and ``ignore_eos`` (llama.cpp honours it too), transformers serve's ``generation_config``."""
    values: dict[str, Any] = {}
    for name in names:
        if name == "min_tokens":
            values[name] = output_tokens
        elif name == "ignore_eos":
            values[name] = True
        elif name == "generation_config":
            values[name] = NO_EOS_CONFIG
    return values


def build_payload(*, endpoint: str, model: str, prompt: str, output_tokens: int,
                  length_fields: Sequence[str] = LENGTH_FIELDS,
                  extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI-style streaming request of at most ``output_tokens`` tokens, forced to exactly that many by the
    ``length_fields`` the server takes (``min_tokens``, ``ignore_eos``: :mod:`cardgen.load.dialect`), with
    ``extra`` fields (an ingestion request's ``cache_prompt: false``)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": output_tokens,
    }
    body.update(length_values(length_fields, output_tokens=output_tokens))
    body["temperature"] = 0.0
    body.update(extra or {})
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _failure(ex: Exchange, parsed_ok: Callable[[], tuple[ErrorKind | None, str | None]]) -> tuple[ErrorKind | None,
                                                                                               str | None]:
    if ex.status is None:
        return ex.kind or ErrorKind.CONNECT, ex.error or "no response"
    if ex.status != 200:
        return ErrorKind.HTTP_STATUS, f"HTTP {ex.status}: {' '.join(body_text(ex)[:160].split())}".strip()
    if ex.kind is not None:
        return ex.kind, ex.error
    return parsed_ok()


def stream_once(conn: Connection, *, endpoint: str, payload: dict[str, Any], record: dict[str, Any],
                timeout_s: float, report: Callable[..., Any], on_text: Callable[[str], None] | None = None,
                wait: Callable[[], bool] | None = None,
                read: Callable[[Answer], dict[str, Any]] | None = None) -> RequestRecord | None:
    """Send one streaming request and return its record (never raises for a server or network fault).

    ``record`` holds the point fields of the RequestRecord (scenario, kind, targets, ...); this adds timing,
    usage and errors. ``report`` is Locust's ``request`` event's ``fire``; ``on_text``, when given, receives the
    reply's text after the stream (a chat turn's history needs it). ``wait``, when given, is called once the
    request is encoded, just before it is sent (an open loop's scheduled time); when it returns False the
    request is not sent and there is no record (None). ``read``, when given, is the kind's shape's reading of the
    answer (:meth:`cardgen.kinds.shape.RequestShape.read`): its fields join the record's ``extra``.
    """
    body = json.dumps(payload).encode()
    if wait is not None and not wait():
        return None
    ex = conn.post(PATHS[endpoint], body, timeout_s=timeout_s)
    with _ONE_AT_A_TIME:
        parsed = _parse(ex)
        if parsed is None or ex.kind is not None or not needs_tokenize(parsed):
            return _finish(ex, parsed, counted(parsed) if parsed else (None, None), endpoint=endpoint,
                           record=record, report=report, on_text=on_text, read=read)
    # reasoning the server did not count: its /tokenize counts it, outside the one-at-a-time section (a round trip)
    reasoning = tokenize_reasoning(conn, parsed, model=str(payload.get("model")), timeout_s=timeout_s)
    with _ONE_AT_A_TIME:
        return _finish(ex, parsed, reasoning, endpoint=endpoint, record=record, report=report, on_text=on_text,
                       read=read)


# What follows a stream (parsing, the record) waits until no read is waiting to be stamped, one stream at a time:
# a batching server ends many streams in the same instant, and their parsing must not delay the stamps of the
# streams still running (nor an open loop's next send) by more than one stream's parsing.
_ONE_AT_A_TIME = Semaphore()
PARSE_ROOM_S = 0.001  # parsing and recording a stream takes ~0.5 ms: not started when an open-loop send is that near


def _parse(ex: Exchange) -> StreamResult | None:
    gevent.idle()
    SENDS.wait_clear(PARSE_ROOM_S)
    return parse_stream(body_reads(ex)) if ex.status == 200 else None


def _finish(ex: Exchange, parsed: StreamResult | None, reasoning: tuple[int | None, str | None], *, endpoint: str,
            record: dict[str, Any], report: Callable[..., Any],
            on_text: Callable[[str], None] | None = None,
            read: Callable[[Answer], dict[str, Any]] | None = None) -> RequestRecord:
    if on_text is not None:
        on_text(parsed.text if parsed is not None else "")

    def stream_verdict() -> tuple[ErrorKind | None, str | None]:
        assert parsed is not None
        if parsed.server_error is not None:
            return ErrorKind.SERVER_ERROR_EVENT, f"error event: {parsed.server_error}"
        if parsed.malformed is not None:
            return ErrorKind.MALFORMED_SSE, f"malformed event: {parsed.malformed!r}"
        if not parsed.complete:
            return ErrorKind.STREAM_DROPPED, "stream ended before data: [DONE] (or a last chunk with usage)"
        if not parsed.chunk_times and not (parsed.output_tokens and parsed.silent_times):
            return ErrorKind.EMPTY, "stream carried no text"
        return None, None

    kind, error = _failure(ex, stream_verdict)
    end_at = ex.end_at if ex.end_at is not None else ex.sent_at
    if read is not None:
        answer = Answer(status=ex.status, text=parsed.text if parsed else "",
                        tool_calls=tuple(parsed.tool_calls) if parsed else (), error=error,
                        finish_reason=parsed.finish_reason if parsed else None)
        record = {**record, "extra": {**(record.get("extra") or {}), **read(answer)}}
    rec = RequestRecord(
        **record,
        sent_at=ex.sent_at,
        headers_at=ex.headers_at,
        # no text at all but the server counted tokens (e.g. 1 special token): its chunk's arrival is the
        # first token
        first_token_at=(parsed.first_token_at or (parsed.silent_times[0] if parsed.silent_times else None))
        if parsed else None,
        chunk_times=parsed.chunk_times if parsed else [],
        end_at=end_at,
        response_id=parsed.response_id if parsed else None,
        status=ex.status,
        prompt_tokens=parsed.prompt_tokens if parsed else None,
        output_tokens=parsed.output_tokens if parsed else None,
        finish_reason=parsed.finish_reason if parsed else None,
        error=error,
        error_kind=kind,
        first_answer_at=parsed.first_answer_at if parsed else None,
        reasoning_chunks=parsed.reasoning_chunks if parsed else None,
        reasoning_tokens=reasoning[0],
        reasoning_tokens_source=reasoning[1],
        cached_tokens=parsed.cached_tokens if parsed else None,
        engine_timings=EngineTimings.of_response(parsed.timings) if parsed else None,
    )
    took_s = RequestFigures.of(rec).elapsed_s  # failed or not: Locust counts a failure's time too
    report(request_type="POST", name=record["scenario"], response_time=took_s * 1000.0,
           response_length=sum(len(c) for _, c in ex.reads), response=None, url=PATHS[endpoint],
           start_time=ex.sent_at, exception=RequestFailed(error) if error is not None else None,
           context={"record": rec})
    return rec
