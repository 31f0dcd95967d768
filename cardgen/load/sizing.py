"""Count prompt tokens the way the server does: its ``/tokenize`` endpoint, else ``usage.prompt_tokens``.

Runs before load starts, with a plain ``requests`` session.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import requests

from cardgen.errors import ServerError
from cardgen.prompts import PromptTemplate, build_template


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def tokenize_counter(session: requests.Session, base: str, model: str, endpoint: str) -> Callable[[str], int] | None:
    """A counter over the server's ``/tokenize`` (vLLM/SGLang/sim form, llama.cpp form, TGI form), or None
    when the server has none that answers."""

    def vllm(text: str) -> int:
        body = {"model": model, "messages": _messages(text)} if endpoint == "chat" else {"model": model, "prompt": text}
        resp = session.post(f"{base}/tokenize", json=body, timeout=30)
        resp.raise_for_status()
        data = resp.json()
        if isinstance(data, dict) and isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data, dict) and isinstance(data.get("tokens"), list):  # llama.cpp: no special tokens
            return len(data["tokens"])
        raise ValueError("unknown /tokenize answer")

    def llamacpp(text: str) -> int:
        resp = session.post(f"{base}/tokenize", json={"content": text, "add_special": True}, timeout=30)
        resp.raise_for_status()
        return len(resp.json()["tokens"])

    if endpoint == "chat":  # only vLLM-style /tokenize applies a chat template; others need calibration
        candidates = [vllm]
    else:
        candidates = [vllm, llamacpp]
    for candidate in candidates:
        try:
            candidate("Hello world")
            return candidate
        except (requests.RequestException, ValueError, KeyError, TypeError):
            continue
    return None


def usage_counter(session: requests.Session, base: str, model: str, endpoint: str) -> Callable[[str], int]:
    """A counter that sends a 1-token request and reads ``usage.prompt_tokens``."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"

    def count(text: str) -> int:
        body: dict = {"model": model, "max_tokens": 1, "stream": False}
        if endpoint == "chat":
            body["messages"] = _messages(text)
        else:
            body["prompt"] = text
        resp = session.post(f"{base}{path}", json=body, timeout=120)
        if resp.status_code != 200:
            raise ServerError(f"sizing prompts failed: {path} answered HTTP {resp.status_code}")
        try:
            return int(resp.json()["usage"]["prompt_tokens"])
        except (ValueError, KeyError, TypeError):
            raise ServerError(f"{path} gave no usage.prompt_tokens: cardgen cannot size prompts") from None

    return count


class PromptBook:
    """Templates per (endpoint, length), built on demand and cached."""

    def __init__(self, session: requests.Session, base: str, model: str) -> None:
        self.session, self.base, self.model = session, base.rstrip("/"), model
        self.method: dict[str, str] = {}
        self._counters: dict[str, Callable[[str], int]] = {}

    def counter(self, endpoint: str) -> Callable[[str], int]:
        if endpoint not in self._counters:
            tok = tokenize_counter(self.session, self.base, self.model, endpoint)
            if tok is not None:
                self.method[endpoint] = "server /tokenize"
                base_counter = tok
            else:
                self.method[endpoint] = "usage.prompt_tokens calibration"
                base_counter = usage_counter(self.session, self.base, self.model, endpoint)
            self._counters[endpoint] = lru_cache(maxsize=4096)(base_counter)
        return self._counters[endpoint]

    def template(self, endpoint: str, tokens: int) -> PromptTemplate:
        return _template_cached(self, endpoint, tokens)


@lru_cache(maxsize=1024)
def _template_cached(book: PromptBook, endpoint: str, tokens: int) -> PromptTemplate:
    return build_template(tokens, book.counter(endpoint))
