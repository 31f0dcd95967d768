"""One short request to the server before any load: what it answers, and how many prompt tokens it counted.

Prompt sizing checks its counter against it (:mod:`cardgen.load.sizing`), and the request dialect is agreed with
it (:mod:`cardgen.load.dialect`). Plain ``requests`` (no gevent): runs before the load starts. The request streams,
as the load's requests do, with ``stream_options.include_usage`` so that the last chunk carries ``usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from cardgen.prompts import PROBE_HEADER

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ASK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Answer:
    """What one request got back: the HTTP status, and for a 200 the usage of its last chunk; else the start of
    the body (the server's reason, on one line)."""

    status: int
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # the body of a non-200 answer, or why a 200 stream could not be read
    body: Mapping[str, Any] | None = None  # a non-200 answer's JSON, when it was JSON

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


class Probes:
    """What cardgen sent the server before the load, by purpose (run.json ``server.probes``): requests, the
    prompt and output tokens the server counted for them, and how many it refused. The load's records never
    include them; a reader comparing the server's counters with the records subtracts these."""

    def __init__(self) -> None:
        self.by_purpose: dict[str, dict[str, int]] = {}

    def add(self, purpose: str, answer: Answer) -> Answer:
        tally = self.by_purpose.setdefault(purpose, {"requests": 0, "prompt_tokens": 0, "output_tokens": 0,
                                                     "refused": 0})
        tally["requests"] += 1
        tally["prompt_tokens"] += answer.prompt_tokens or 0
        tally["output_tokens"] += answer.output_tokens or 0
        tally["refused"] += answer.status != 200
        return answer


def request_body(*, endpoint: str, model: str, text: str, max_tokens: int = 1,
                 fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                            "max_tokens": max_tokens, "temperature": 0.0, **(fields or {})}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


def ask(session: requests.Session, base: str, *, endpoint: str, model: str, text: str, max_tokens: int = 1,
        fields: Mapping[str, Any] | None = None, timeout_s: float = ASK_TIMEOUT_S) -> Answer:
    """Send one streaming request and read it to its end. Raises ``requests.RequestException`` when the server
    cannot be reached or does not answer in time; any answer it gives is an :class:`Answer`."""
    body = request_body(endpoint=endpoint, model=model, text=text, max_tokens=max_tokens, fields=fields)
    with session.post(f"{base}{PATHS[endpoint]}", json=body, timeout=timeout_s, stream=True,
                      headers={PROBE_HEADER: "1"}) as resp:
        if resp.status_code != 200:
            raw = resp.text
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            return Answer(status=resp.status_code, error=one_line(raw) or f"HTTP {resp.status_code}",
                          body=parsed if isinstance(parsed, dict) else None)
        prompt = output = finish = error = None
        for line in resp.iter_lines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                error = f"malformed event: {one_line(data.decode('utf-8', 'replace'), 80)}"
                break
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk and not chunk.get("choices"):
                error = f"error event: {one_line(json.dumps(chunk['error']))}"
                break
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    finish = str(choice["finish_reason"])
            usage = chunk.get("usage")
            if isinstance(usage, dict):
                prompt = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else prompt
                output = usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) \
                    else output
    return Answer(status=200, prompt_tokens=prompt, output_tokens=output, finish_reason=finish, error=error)
