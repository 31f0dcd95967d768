"""Count prompt tokens the way the server does, and trust no counter the server's own usage contradicts.

Servers speak several forms of ``/tokenize`` (vLLM, SGLang and the virtual server: ``{"model", "prompt"}`` or
``{"model", "messages"}``; llama.cpp: ``{"content", "add_special"}``, and ``/apply-template`` for chat; TGI:
``{"inputs"}``), and a server may answer a form it does not speak with a 200 that means nothing (llama.cpp
answers vLLM's form with ``{"tokens": []}``). So each endpoint's counter is chosen by evidence: one short
request's ``usage.prompt_tokens`` (:func:`cardgen.load.ask.ask`) is the reference, and the first form whose count
of the same text agrees is taken. A form that counts non-empty text as 0 tokens is never taken. When no form
agrees (or there is no ``/tokenize``), prompts are sized from ``usage.prompt_tokens`` of 1-token requests.

Runs before load starts, with a plain ``requests`` session.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import requests

from cardgen.errors import ServerError
from cardgen.load.ask import Answer, Probes, ask
from cardgen.prompts import PromptTemplate, build_template, filler_words, id_style_for

#: the text every counter is checked on: the shape of a real prompt (a request id, then filler)
PROBE_TEXT = "Request 4821-07391564. " + " ".join(filler_words(48, seed=7))
TIMEOUT_S = 30.0


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _json(resp: requests.Response) -> Any:
    resp.raise_for_status()
    return resp.json()


@dataclass(frozen=True)
class TokenizeForm:
    """One way of asking ``/tokenize``: its name (as run.json says how prompts were sized) and the call."""

    name: str
    count: Callable[[str], int]


def tokenize_forms(session: requests.Session, base: str, model: str, endpoint: str) -> list[TokenizeForm]:
    """Every ``/tokenize`` form cardgen knows for ``endpoint``, most common first."""

    def post(path: str, body: dict[str, Any]) -> Any:
        return _json(session.post(f"{base}{path}", json=body, timeout=TIMEOUT_S))

    def vllm(text: str) -> int:
        key, value = ("messages", _messages(text)) if endpoint == "chat" else ("prompt", text)
        data = post("/tokenize", {"model": model, key: value})
        if isinstance(data, dict) and isinstance(data.get("count"), int):
            return int(data["count"])
        if isinstance(data, dict) and isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        raise ValueError("no count in the /tokenize answer")

    def llamacpp(add_special: bool, template: bool) -> Callable[[str], int]:
        def count(text: str) -> int:
            if template:  # llama.cpp renders the chat template, then tokenizes what it renders
                text = str(post("/apply-template", {"messages": _messages(text)})["prompt"])
            return len(post("/tokenize", {"content": text, "add_special": add_special,
                                          "parse_special": True})["tokens"])
        return count

    def tgi(text: str) -> int:
        data = post("/tokenize", {"inputs": text})
        if not isinstance(data, list):
            raise ValueError("no token list in the /tokenize answer")
        return len(data)

    if endpoint == "chat":
        return [TokenizeForm("/tokenize (messages)", vllm),
                TokenizeForm("/apply-template then /tokenize", llamacpp(False, True)),
                TokenizeForm("/apply-template then /tokenize, special tokens added", llamacpp(True, True))]
    return [TokenizeForm("/tokenize (prompt)", vllm),
            TokenizeForm("/tokenize (content, special tokens added)", llamacpp(True, False)),
            TokenizeForm("/tokenize (content)", llamacpp(False, False)),
            TokenizeForm("/tokenize (inputs)", tgi)]


def usage_counter(session: requests.Session, base: str, model: str, endpoint: str,
                  probes: Probes | None = None) -> Callable[[str], int]:
    """A counter that sends a 1-token request and reads its ``usage.prompt_tokens``. A prompt over the server's
    context counts as what the server says it counted (llama.cpp's error carries ``n_prompt_tokens``)."""
    tally = probes or Probes()

    def count(text: str) -> int:
        answer = tally.add("sizing prompts from usage", ask(session, base, endpoint=endpoint, model=model, text=text))
        if answer.ok and answer.prompt_tokens is not None:
            return answer.prompt_tokens
        said = _error_field(answer, "n_prompt_tokens")
        if said is not None:
            return said
        raise ServerError(f"sizing prompts from usage.prompt_tokens failed: {describe(answer)}")

    return count


def _error_field(answer: Answer, name: str) -> int | None:
    err = (answer.body or {}).get("error")
    value = err.get(name) if isinstance(err, dict) else None
    return int(value) if isinstance(value, int) and value > 0 else None


def describe(answer: Answer) -> str:
    """An answer in a few words: ``HTTP 422: ...``, or what a 200 lacked."""
    if answer.status != 200:
        return f"HTTP {answer.status}: {answer.error}"
    if answer.error:
        return answer.error
    return "its stream carried no usage.prompt_tokens"


@dataclass
class Choice:
    """The counter chosen for one endpoint, how, and what the other forms said (run.json ``server.tokenizer``)."""

    count: Callable[[str], int]
    method: str
    rejected: list[str] = field(default_factory=list)


def choose_counter(session: requests.Session, base: str, model: str, endpoint: str,
                   probes: Probes | None = None) -> Choice:
    """The first ``/tokenize`` form whose count of :data:`PROBE_TEXT` equals the server's own
    ``usage.prompt_tokens`` for it; else the usage counter. A one-line ServerError when the server gives no usage
    for a plain 1-token request (nothing could check a counter, nor size a prompt)."""
    tally = probes or Probes()
    reference = tally.add("checking the prompt counter", ask(session, base, endpoint=endpoint, model=model,
                                                             text=PROBE_TEXT))
    if not reference.ok or reference.prompt_tokens is None:
        raise ServerError(f"cannot size prompts: a 1-token request to {base} got {describe(reference)}")
    want = reference.prompt_tokens
    rejected: list[str] = []
    for form in tokenize_forms(session, base, model, endpoint):
        try:
            got = form.count(PROBE_TEXT)
        except (requests.RequestException, ValueError, KeyError, TypeError):
            continue  # the server does not speak this form
        if got <= 0:
            rejected.append(f"{form.name} counted {got} tokens for non-empty text")
        elif got != want:
            rejected.append(f"{form.name} counted {got} tokens where usage.prompt_tokens says {want}")
        else:
            return Choice(form.count, f"server {form.name}, checked against usage.prompt_tokens", rejected)
    return Choice(usage_counter(session, base, model, endpoint, tally), "usage.prompt_tokens of 1-token requests",
                  rejected)


class PromptBook:
    """Templates per (endpoint, length), built on demand and cached; each endpoint's counter chosen once."""

    def __init__(self, session: requests.Session, base: str, model: str) -> None:
        self.session, self.base, self.model = session, base.rstrip("/"), model
        self.probes = Probes()  # every request sent to count prompts (none when /tokenize counts them)
        self.method: dict[str, str] = {}
        self.rejected: dict[str, list[str]] = {}
        self._counters: dict[str, Callable[[str], int]] = {}
        self._per_word: dict[str, float] = {}
        self._style: tuple[str, int] | None = None

    def style(self, endpoint: str) -> str:
        """How request ids are written in this run's prompts: the first style in which the server counts every id
        the same (:func:`cardgen.prompts.id_style_for`), chosen once, with the first endpoint's counter."""
        if self._style is None:
            self._style = id_style_for(self.counter(endpoint))
        return self._style[0]

    @property
    def id_spread(self) -> int:
        """How many tokens the request ids may still differ by (0: every prompt is exactly its length)."""
        return self._style[1] if self._style else 0

    def counter(self, endpoint: str) -> Callable[[str], int]:
        if endpoint not in self._counters:
            choice = choose_counter(self.session, self.base, self.model, endpoint, self.probes)
            self.method[endpoint] = choice.method
            self.rejected[endpoint] = choice.rejected
            self._counters[endpoint] = lru_cache(maxsize=4096)(choice.count)
        return self._counters[endpoint]

    def template(self, endpoint: str, tokens: int) -> PromptTemplate:
        return _template_cached(self, endpoint, tokens)

    def max_words(self, endpoint: str, tokens: int) -> int | None:
        """How many filler words a prompt of ``tokens`` may be sized from: None (twice the tokens) when counting is
        free; when every count is a request, a little more than the tokens take, so that no request sent to count
        a prompt is much longer than the prompt itself (it could exceed the server's context)."""
        if not self.method[endpoint].startswith("usage"):
            return None
        if endpoint not in self._per_word:
            words = 64
            self._per_word[endpoint] = self.counter(endpoint)(" ".join(filler_words(words))) / words
        return max(16, math.ceil(1.1 * tokens / max(self._per_word[endpoint], 0.1)) + 8)

    def describe(self) -> str:
        """How prompts were sized, per endpoint, for run.json's ``server.tokenizer``."""
        parts = sorted(set(self.method.values()))
        return ", ".join(parts) or "unknown"


@lru_cache(maxsize=1024)
def _template_cached(book: PromptBook, endpoint: str, tokens: int) -> PromptTemplate:
    counter = book.counter(endpoint)
    return build_template(tokens, counter, max_words=book.max_words(endpoint, tokens), style=book.style(endpoint))
