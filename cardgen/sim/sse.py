"""Server-sent events as the virtual server writes them: HTTP/1.1 chunks of ``data:`` events, and the text of
each output token (one word of the simulated tokenizer's output vocabulary)."""

from __future__ import annotations

from cardgen.sim import tokenizer

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
WORDS = tuple(f" {w}" for w in tokenizer.OUTPUT_WORDS)
NWORDS = len(WORDS)
DONE = b"data: [DONE]\n\n"


def frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (the response is chunked; the driver writes to the transport itself)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def event(data: str) -> bytes:
    """One SSE event."""
    return b"data: " + data.encode() + b"\n\n"


def token_text(n: int) -> str:
    """Text of output token ``n`` (1-based): one word with a leading space."""
    return WORDS[n % NWORDS]
