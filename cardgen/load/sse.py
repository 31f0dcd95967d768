"""Parse a server-sent-events stream *after* it ended, from the network reads and their arrival times.

While streaming, the client only stamps each read (``time.time()``) and keeps its bytes: the cheapest
thing a greenlet can do. This module turns those reads into what a record needs. An event's time is the
arrival time of the read that completed it.
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


def _apply(result: StreamResult, payload: str, at: float) -> None:
    if payload == "[DONE]":
        result.done = True
        return
    result.events += 1
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        if result.malformed is None:
            result.malformed = payload[:80]
        return
    if not isinstance(obj, dict):
        if result.malformed is None:
            result.malformed = payload[:80]
        return
    if "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        result.server_error = str(msg)[:200]
        return
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


def parse_stream(reads: list[tuple[float, bytes]]) -> StreamResult:
    """Parse timestamped reads of an SSE body. Handles events split across reads, several events in one
    read, CRLF line ends, comments and multi-line ``data:`` fields."""
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
