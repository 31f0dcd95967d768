"""A reasoning stream's token count: the server's own where it gives one, else its ``/tokenize`` of the reasoning
text.

``usage.completion_tokens_details.reasoning_tokens`` is what vLLM (with a reasoning parser) and SGLang say; a
server that streams reasoning but counts none (a parser that does not count, vLLM's ``granite`` among them: it
says 0; a ``<think>`` span from a server without a parser: it says nothing) gets its reasoning text counted by its
own ``/tokenize``, once the stream is over, on the same keep-alive connection. Special tokens are not added (the
reasoning is the middle of a text), and the ``<think>`` tags are not counted, as vLLM's parsers count. A server
without a ``/tokenize`` that answers is asked once per process: its counts stay unknown (None).
"""

from __future__ import annotations

import json

from cardgen.load.sse import StreamResult
from cardgen.load.transport import Connection, body_text

USAGE, TOKENIZE = "usage", "tokenize"
_NO_TOKENIZE: set[tuple[str, int]] = set()  # servers whose /tokenize did not answer


def needs_tokenize(parsed: StreamResult) -> bool:
    """Whether the stream carried reasoning the server did not count."""
    return parsed.reasoning_chunks > 0 and not parsed.reasoning_tokens and bool(parsed.reasoning_text)


def counted(parsed: StreamResult) -> tuple[int | None, str | None]:
    """The reasoning tokens the server's ``usage`` gave (0 for a stream without reasoning when it says so)."""
    return (parsed.reasoning_tokens, USAGE) if parsed.reasoning_tokens is not None else (None, None)


def tokenize_reasoning(conn: Connection, parsed: StreamResult, *, model: str,
                       timeout_s: float) -> tuple[int | None, str | None]:
    """The reasoning text's tokens by the server's ``/tokenize``; (None, None) when it does not answer."""
    where = (conn.target.host, conn.target.port)
    if where in _NO_TOKENIZE:
        return None, None
    body = json.dumps({"model": model, "prompt": parsed.reasoning_text, "add_special_tokens": False}).encode()
    ex = conn.post("/tokenize", body, timeout_s=timeout_s)
    try:
        answer = json.loads(body_text(ex)) if ex.status == 200 else None
    except ValueError:
        answer = None
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int):
        if ex.status is not None:  # it answered, but not with a count: it has none to give
            _NO_TOKENIZE.add(where)
        return None, None
    return count, TOKENIZE
