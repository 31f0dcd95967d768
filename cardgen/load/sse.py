"""Parse a server-sent-events stream *after* it ended, from the network reads and their arrival times.

While streaming, the client only stamps each read (``time.time()``) and keeps its bytes: the cheapest
thing it can do. This module turns those reads into what a record needs. An event's time is the arrival time
of the read that completed it.

Parsing costs CPU per chunk too, in the same process that stamps the next chunks, so the common case is made
cheap without changing what any stream means: most events of a stream are the same JSON object but for the
one text string, byte for byte. Once an event has been parsed, its bytes around its text string are kept
(:class:`_Template`); a later event with the same bytes around a JSON string is that object with another
text, so its effect is known without parsing it. Anything else is parsed in full.

A reasoning model's stream has two parts: its reasoning (``delta.reasoning_content`` of SGLang and older vLLM,
``delta.reasoning`` of vLLM 0.10 and later, or, from a server without a reasoning parser, the text of a
``<think>`` span: ``<think>...</think>`` or, when the chat template opened it, everything up to ``</think>``)
and its answer (``text`` / ``delta.content`` outside that span). Every text-bearing chunk of either part is a
chunk (TTFT is the first of them); the answer's first chunk is the first answer token, and the reasoning part's
text and token count (``usage.completion_tokens_details.reasoning_tokens`` where the server gives one) are kept.

A tool call streams as ``delta.tool_calls``: a list of ``{"index", "id", "function": {"name", "arguments"}}``
fragments, the name in the first fragment of a call and its arguments' text spread over the rest (a server may
also send a whole call in one). A chunk that carries any of it is a chunk of the answer (TTFT, the gaps between
tokens), though it carries no text; the calls are joined by their ``index`` (:attr:`StreamResult.tool_calls`).
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
    text_parts: list[str] = field(default_factory=list)  # the answer text the chunks carried, in order
    # reasoning: the chunks that carried only reasoning text (merged into chunk_times once parsed), the reasoning
    # text, how many chunks carried some of it, the answer's first chunk, and the server's count of its tokens
    reasoning_times: list[float] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)
    reasoning_chunks: int = 0
    first_answer_at: float | None = None
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    timings: dict[str, Any] | None = None  # the engine's own account (llama.cpp's ``timings``, vLLM's ``metrics``)
    # the tool calls the answer made, each {"name", "arguments"} (the arguments' text as streamed), in order
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_times: list[float] = field(default_factory=list)  # chunks that carried only tool-call fragments

    @property
    def text(self) -> str:
        """The answer's text (a chat scenario sends it back as the assistant's turn, without the reasoning)."""
        return "".join(self.text_parts)

    @property
    def reasoning_text(self) -> str:
        """The reasoning part's text (inside a ``<think>`` span: without its tags)."""
        return "".join(self.reasoning_parts)

    @property
    def complete(self) -> bool:
        """Whether the stream said all it had to: ``data: [DONE]``, or (from a server that never sends it, such as
        ``transformers serve``) a finish reason and the usage, which only the last chunk carries."""
        return self.done or (self.finish_reason is not None and self.output_tokens is not None)

    @property
    def first_token_at(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None


REASONING_FIELDS = ("reasoning_content", "reasoning")  # SGLang's and vLLM's before 0.10; vLLM's since
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def _chunk_texts(obj: dict[str, Any]) -> tuple[str, str]:
    """The answer text and the reasoning text a completion or chat chunk carries ('' for none: role-only, empty
    or usage-only chunks)."""
    answer: list[str] = []
    reasoning: list[str] = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        text = choice.get("text")
        if text is None:
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content")
                thought = next((t for t in (delta.get(f) for f in REASONING_FIELDS) if isinstance(t, str) and t), "")
                if thought:
                    reasoning.append(thought)
        if isinstance(text, str) and text:
            answer.append(text)
    return "".join(answer), "".join(reasoning)


def _tool_fragments(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool-call fragments a chat chunk carries (``delta.tool_calls`` of each choice; a whole ``message``'s
    ``tool_calls`` too), each a dict as the server sent it."""
    out: list[dict[str, Any]] = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        for key in ("delta", "message"):
            part = choice.get(key)
            calls = part.get("tool_calls") if isinstance(part, dict) else None
            if isinstance(calls, list):
                out.extend(c for c in calls if isinstance(c, dict))
    return out


def _add_tool_fragments(result: StreamResult, fragments: list[dict[str, Any]]) -> None:
    """Join ``fragments`` into the result's calls: a fragment with a new ``index`` (or none, after a named one)
    opens a call, the others add to their call's name and arguments."""
    calls = result.tool_calls
    for frag in fragments:
        index = frag.get("index")
        function = frag.get("function")
        function = function if isinstance(function, dict) else {}
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(index, int) or isinstance(index, bool):
            index = len(calls) if name else max(len(calls) - 1, 0)
        while len(calls) <= index:
            calls.append({"name": "", "arguments": ""})
        call = calls[index]
        if isinstance(name, str):
            call["name"] += name
        if isinstance(arguments, str):
            call["arguments"] += arguments
        elif isinstance(arguments, dict):  # a server that sends the arguments as an object
            call["arguments"] += json.dumps(arguments)


def _is_token_chunk(obj: dict[str, Any]) -> bool:
    """A chunk with a choice that is not role-only: it carries a token even when its text is empty (a special
    token, or part of a multi-byte character)."""
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if "role" not in delta and ("content" in delta or any(f in delta for f in REASONING_FIELDS)):
                return True
        elif "text" in choice:
            return True
    return False


_TEXT_KEYS = (b'"text":', b'"content":')
_DELTA_KEYS = {"content": b'"content":', "reasoning_content": b'"reasoning_content":', "reasoning": b'"reasoning":'}


class _Template:
    """A parsed event's bytes around its one text string (``prefix`` + JSON string + ``suffix``): an event
    with the same bytes around a JSON string is the same object with another text. A JSON string holds no
    unescaped quote, so such bytes cannot mean anything else; strings with quotes or a trailing backslash in
    them are not matched (they are parsed in full)."""

    __slots__ = ("prefix", "suffix", "size", "silent", "reasoning")

    def __init__(self, prefix: bytes, suffix: bytes, silent: bool, reasoning: bool = False) -> None:
        self.prefix, self.suffix = prefix, suffix
        self.size = len(prefix) + len(suffix)
        self.silent = silent  # with an empty text, the event is still a token (not a role-only chunk)
        self.reasoning = reasoning  # the text is the reasoning part's (``delta.reasoning``...)

    @classmethod
    def of(cls, payload: bytes, obj: dict[str, Any]) -> _Template | None:  # one event's shape
        """The template of a parsed token event: one choice, no finish, usage or error (their effect would have
        to be repeated), text in ``text`` or in one of ``delta.content``, ``delta.reasoning``,
        ``delta.reasoning_content`` (the others absent or null); None for any other event."""
        choices = obj.get("choices")
        if obj.get("usage") is not None or "error" in obj or not isinstance(choices, list) or len(choices) != 1:
            return None
        choice = choices[0]
        if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
            return None
        delta = choice.get("delta")
        reasoning = False
        if isinstance(delta, dict):
            if "text" in choice:
                return None
            fields = [f for f in _DELTA_KEYS if delta.get(f) is not None]
            if len(fields) > 1 or "role" in delta:
                return None
            field_name = fields[0] if fields else "content"
            text, key, reasoning = delta.get(field_name), _DELTA_KEYS[field_name], field_name != "content"
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
        return cls(payload[:start], payload[end + 1:], _is_token_chunk(obj), reasoning)


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
    text, thought = _chunk_texts(obj)
    fragments = _tool_fragments(obj)
    if fragments:
        _add_tool_fragments(result, fragments)
    if thought:
        result.reasoning_parts.append(thought)
        result.reasoning_chunks += 1
    if text:
        result.chunk_times.append(at)
        result.text_parts.append(text)
    elif thought:
        result.reasoning_times.append(at)
    elif fragments:
        result.tool_times.append(at)
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
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
            result.reasoning_tokens = details["reasoning_tokens"]
        prompt_details = usage.get("prompt_tokens_details")
        if isinstance(prompt_details, dict) and isinstance(prompt_details.get("cached_tokens"), int):
            result.cached_tokens = prompt_details["cached_tokens"]
    timings = obj.get("timings")
    if isinstance(timings, dict):
        result.timings = {"source": "timings", **timings}
    metrics = obj.get("metrics")  # vLLM's per-request metrics (--enable-per-request-metrics), on the usage chunk
    if isinstance(metrics, dict):
        result.timings = {"source": "metrics", **metrics}
    return obj


def _settle(result: StreamResult) -> StreamResult:
    """The stream's two parts, once every event is in: where the answer starts, and every text chunk in
    ``chunk_times`` (reasoning-only and tool-call chunks merged in, in time order: a tool call is answer). Without
    reasoning fields, a ``<think>`` span in the answer's text is the reasoning (:func:`_split_think`)."""
    _settle_text(result)
    if result.tool_times:
        first_tool = result.tool_times[0]
        if result.first_answer_at is None or first_tool < result.first_answer_at:
            result.first_answer_at = first_tool
        result.chunk_times = sorted(result.chunk_times + result.tool_times)
    return result


def _settle_text(result: StreamResult) -> None:
    """Where the text answer starts, reasoning-only chunks merged in (see :func:`_settle`)."""
    if result.reasoning_times or result.reasoning_parts:
        result.first_answer_at = result.chunk_times[0] if result.chunk_times else None
        if result.reasoning_times:
            result.chunk_times = sorted(result.chunk_times + result.reasoning_times)
        parts = result.reasoning_parts
        if parts and parts[0].startswith(THINK_OPEN):  # vLLM's parsers pass the tag on when it shares a delta
            parts[0] = parts[0][len(THINK_OPEN):]
        return
    whole = "".join(result.text_parts)
    if THINK_CLOSE in whole or whole.lstrip().startswith(THINK_OPEN):
        _split_think(result, whole)
    elif result.chunk_times:
        result.first_answer_at = result.chunk_times[0]


def _split_think(result: StreamResult, whole: str) -> None:
    """The text of a server without a reasoning parser: the reasoning is what precedes the first ``</think>``
    (a leading ``<think>`` left out, as vLLM's parsers do); a text that opens ``<think>`` and never closes it is
    all reasoning. A chunk is a reasoning chunk when it carries some of the span (its tags included), the answer's
    first chunk the first that carries text after it."""
    close = whole.find(THINK_CLOSE)
    end = len(whole) if close < 0 else close + len(THINK_CLOSE)  # where the span ends, its tags included
    inner = whole[:close] if close >= 0 else whole
    if inner.lstrip().startswith(THINK_OPEN):
        inner = inner.lstrip()[len(THINK_OPEN):]
    offset = 0
    for at, part in zip(result.chunk_times, result.text_parts, strict=True):
        if offset < end:
            result.reasoning_chunks += 1
        offset += len(part)
        if offset > end and result.first_answer_at is None:
            result.first_answer_at = at
    result.reasoning_parts = [inner]
    result.text_parts = [whole[end:]]


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
    return _settle(result)


class _Events:
    """Applies events to a result, through the last template where they match it."""

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self.template: _Template | None = None
        self.chunk_times = result.chunk_times.append
        self.text_parts = result.text_parts.append
        self.silent_times = result.silent_times.append
        self.reasoning_times = result.reasoning_times.append
        self.reasoning_parts = result.reasoning_parts.append

    def simple(self, payload: bytes, at: float) -> None:
        """A one-line ``data: <payload>`` event."""
        t = self.template
        if t is not None and len(payload) >= t.size + 2 and payload.startswith(t.prefix) and payload.endswith(t.suffix):
            literal = payload[len(t.prefix):len(payload) - len(t.suffix)]
            inner = literal[1:-1]
            if literal[:1] == b'"' and literal[-1:] == b'"' and b'"' not in inner and inner[-1:] != b"\\":
                self.result.events += 1
                if inner:
                    text = json.loads(literal) if b"\\" in inner else inner.decode("utf-8", "replace")
                    if t.reasoning:
                        self.reasoning_times(at)
                        self.reasoning_parts(text)
                        self.result.reasoning_chunks += 1
                    else:
                        self.chunk_times(at)
                        self.text_parts(text)
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
    return _settle(result)
