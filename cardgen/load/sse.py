"""Parse a server-sent-events stream *after* it ended, from the network reads and their arrival times.

While streaming, the client only stamps each read (``time.time()``) and keeps its bytes: the cheapest
thing it can do. This module turns those reads into what a record needs. An event's time is the arrival time
of the read that completed it.

Parsing costs CPU per chunk too, in the same process that stamps the next chunks, so the common case is made
cheap without changing what any stream means: most events of a stream are the same JSON object but for the
one text string, byte for byte. Once an event has been parsed, its bytes around its text string are kept
(:class:`_Template`); a later event with the same bytes around a JSON string is that object with another
text, so its effect is known without parsing it. Anything else is parsed in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    """What one OpenAI-style completion stream said."""

    response_id: str | None = None
    chunk_times: list[float] = field(default_factory=list)  # text-bearing chunks only
    silent_times: list[float] = field(default_factory=list)  # token chunks whose text is empty (not role-only)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False  # saw `data: [DONE]`
    events: int = 0
    malformed: str | None = None  # first malformed event, shortened
    server_error: str | None = None  # an {"error": ...} object in the stream
    text_parts: list[str] = field(default_factory=list)  # the text the chunks carried, in order

    @property
    def text(self) -> str:
        """The whole generated text (a chat scenario sends it back as the assistant's turn)."""
        return "".join(self.text_parts)

    @property
    def first_token_at(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None


def _chunk_text(obj: dict[str, Any]) -> str:
    """The text a completion or chat chunk carries ('' for role-only, empty or usage-only chunks)."""
    parts: list[str] = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        text = choice.get("text")
        if text is None:
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content")
                if not text:
                    text = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(text, str) and text:
            parts.append(text)
    return "".join(parts)


def _is_token_chunk(obj: dict[str, Any]) -> bool:
    """A chunk with a choice that is not role-only: it carries a token even when its text is empty (a special
    token, or part of a multi-byte character)."""
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if "role" not in delta and "content" in delta:
                return True
        elif "text" in choice:
            return True
    return False


_TEXT_KEYS = (b'"text":', b'"content":')


class _Template:
    """A parsed event's bytes around its one text string (``prefix`` + JSON string + ``suffix``): an event
    with the same bytes around a JSON string is the same object with another text. A JSON string holds no
    unescaped quote, so such bytes cannot mean anything else; strings with quotes or a trailing backslash in
    them are not matched (they are parsed in full)."""

    __slots__ = ("prefix", "suffix", "size", "silent")

    def __init__(self, prefix: bytes, suffix: bytes, silent: bool) -> None:
        self.prefix, self.suffix = prefix, suffix
        self.size = len(prefix) + len(suffix)
        self.silent = silent  # with an empty text, the event is still a token (not a role-only chunk)

    @classmethod
    def of(cls, payload: bytes, obj: dict[str, Any]) -> _Template | None:
        """The template of a parsed token event: one choice, no finish, usage or error (their effect would have
        to be repeated), text in ``text`` or ``delta.content`` alone; None for any other event."""
        choices = obj.get("choices")
        if obj.get("usage") is not None or "error" in obj or not isinstance(choices, list) or len(choices) != 1:
            return None
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
            return None
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text, key = delta.get("content"), _TEXT_KEYS[1]
            if "reasoning_content" in delta or "reasoning" in delta or "text" in choice:
                return None
        else:
            text, key = choice.get("text"), _TEXT_KEYS[0]
        if not isinstance(text, str) or payload.count(key) != 1:
            return None
        start = payload.index(key) + len(key)
        if payload[start:start + 1] != b'"':
            return None
        end = start + 1
        while True:  # the closing quote: the first one after an even number of backslashes
            end = payload.find(b'"', end)
            if end < 0:
                return None
            backslashes = len(payload[start + 1:end]) - len(payload[start + 1:end].rstrip(b"\\"))
            if backslashes % 2 == 0:
                break
            end += 1
        try:
            if json.loads(payload[start:end + 1]) != text:
                return None
        except ValueError:
            return None
        return cls(payload[:start], payload[end + 1:], _is_token_chunk(obj))


def _apply(result: StreamResult, payload: str, at: float) -> dict[str, Any] | None:
    """Apply one event's data to the result; the parsed object, when it was a JSON object."""
    if payload == "[DONE]":
        result.done = True
        return None
    result.events += 1
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        if result.malformed is None:
            result.malformed = payload[:80]
        return None
    if not isinstance(obj, dict):
        if result.malformed is None:
            result.malformed = payload[:80]
        return None
    if "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        result.server_error = str(msg)[:200]
        return obj
    if result.response_id is None and isinstance(obj.get("id"), str):
        result.response_id = obj["id"]
    text = _chunk_text(obj)
    if text:
        result.chunk_times.append(at)
        result.text_parts.append(text)
    elif _is_token_chunk(obj):
        result.silent_times.append(at)
    for choice in obj.get("choices") or ():
        if isinstance(choice, dict) and choice.get("finish_reason"):
            result.finish_reason = str(choice["finish_reason"])
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            result.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            result.output_tokens = usage["completion_tokens"]
    return obj


def _event_data(event: bytes) -> bytes | None:
    """The data of one event's lines (``data:`` fields joined by newlines; comments and other fields left
    out); None when it has no data field."""
    lines = []
    for raw in event.split(b"\n"):
        if not raw or raw.startswith(b":"):
            continue
        name, _, value = raw.partition(b":")
        if name == b"data":
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None


def parse_stream(reads: list[tuple[float, bytes]]) -> StreamResult:
    """Parse timestamped reads of an SSE body. Handles events split across reads, several events in one
    read, CRLF line ends, comments and multi-line ``data:`` fields."""
    if any(b"\r" in chunk for _, chunk in reads):
        return _parse_lines(reads)
    result = StreamResult()
    state = _Events(result)
    simple = state.simple
    carry = b""
    for at, chunk in reads:
        # the common read: one whole `data: ...` event, nothing before it
        if not carry and chunk[-2:] == b"\n\n" and chunk.find(b"\n") == len(chunk) - 2 and chunk[:6] == b"data: ":
            simple(chunk[6:-2], at)
            continue
        carry += chunk
        pos = 0
        while True:
            end = carry.find(b"\n\n", pos)
            if end < 0:
                break
            state.event(carry[pos:end], at)
            pos = end + 2
        carry = carry[pos:]
    last = carry.rfind(b"\n")
    if last >= 0:  # a last event without its blank line: still count it (a partial line does not)
        payload = _event_data(carry[:last])
        if payload is not None:
            _apply(result, payload.decode("utf-8", errors="replace"), reads[-1][0])
    # a partial line left over means the stream was cut mid-event: `done` stays False
    return result


class _Events:
    """Applies events to a result, through the last template where they match it."""

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self.template: _Template | None = None
        self.chunk_times = result.chunk_times.append
        self.text_parts = result.text_parts.append
        self.silent_times = result.silent_times.append

    def simple(self, payload: bytes, at: float) -> None:
        """A one-line ``data: <payload>`` event."""
        t = self.template
        if t is not None and len(payload) >= t.size + 2 and payload.startswith(t.prefix) and payload.endswith(t.suffix):
            literal = payload[len(t.prefix):len(payload) - len(t.suffix)]
            inner = literal[1:-1]
            if literal[:1] == b'"' and literal[-1:] == b'"' and b'"' not in inner and inner[-1:] != b"\\":
                self.result.events += 1
                if inner:
                    self.chunk_times(at)
                    self.text_parts(json.loads(literal) if b"\\" in inner else inner.decode("utf-8", "replace"))
                elif t.silent:
                    self.silent_times(at)
                return
        self._full(payload, at)

    def event(self, event: bytes, at: float) -> None:
        """Any event (its lines, without the blank line that ended it)."""
        if event.startswith(b"data: ") and event.find(b"\n") < 0:
            self.simple(event[6:], at)
            return
        payload = _event_data(event)
        if payload is not None:
            _apply(self.result, payload.decode("utf-8", errors="replace"), at)

    def _full(self, payload: bytes, at: float) -> None:
        obj = _apply(self.result, payload.decode("utf-8", errors="replace"), at)
        if obj is not None:
            self.template = _Template.of(payload, obj) or self.template


def _parse_lines(reads: list[tuple[float, bytes]]) -> StreamResult:
    """The general parser, line by line (CRLF line ends)."""
    result = StreamResult()
    buf = b""
    data_lines: list[str] = []
    for at, chunk in reads:
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            raw, buf = buf[:nl], buf[nl + 1 :]
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if not line:  # end of one event
                if data_lines:
                    _apply(result, "\n".join(data_lines), at)
                    data_lines = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data_lines.append(value[1:] if value.startswith(" ") else value)
    if data_lines:  # a last event without its blank line: still count it
        _apply(result, "\n".join(data_lines), reads[-1][0])
    # a partial line left in `buf` means the stream was cut mid-event: `done` stays False
    return result
