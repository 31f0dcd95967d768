"""Prompt sizing and the request dialect against servers that answer strangely: a ``/tokenize`` that counts text
as 0 tokens, one that disagrees with the server's own usage, none at all, a server that gives no usage, one
whose counter never grows, one that refuses cardgen's extension fields. Each gets the right counter, a stated
fallback or a one-line error; none a runaway loop."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from cardgen.engines.llamacpp import LlamaCppAdapter
from cardgen.engines.openai import OpenAIAdapter
from cardgen.errors import ServerError
from cardgen.load.dialect import agree
from cardgen.load.sizing import PROBE_TEXT, PromptBook, choose_counter
from cardgen.prompts import PROBE_HEADER, build_template, id_style_for


def words(text: str) -> int:
    """The fake server's tokenizer: one token per word, and a BOS."""
    return len(text.split()) + 1


class FakeServer:
    """A loopback server whose ``/tokenize`` and ``/v1/completions`` answers are the test's functions; it counts
    the requests it got."""

    def __init__(self, *, tokenize: Callable[[dict], tuple[int, Any]] | None,
                 usage: Callable[[str], int | None] = words,
                 refuse: tuple[str, ...] = ()) -> None:
        self.tokenize, self.usage, self.refuse = tokenize, usage, refuse
        self.completions: list[dict] = []
        self.probes = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    if outer.tokenize is None:
                        self._send(404, b'{"detail":"Not Found"}')
                        return
                    status, answer = outer.tokenize(body)
                    self._send(status, json.dumps(answer).encode())
                    return
                outer.completions.append(body)
                outer.probes += PROBE_HEADER in self.headers
                refused = [f for f in outer.refuse if f in body]
                if refused:
                    self._send(422, json.dumps({"detail": f"Unexpected fields in the request: {set(refused)}"}).encode())
                    return
                n = outer.usage(body["prompt"])
                usage = {"prompt_tokens": n, "completion_tokens": 1} if n is not None else None
                events = [{"choices": [{"text": " x", "index": 0, "finish_reason": None}]},
                          {"choices": [{"text": "", "index": 0, "finish_reason": "length"}], "usage": usage}]
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self._send(200, data, "text/event-stream")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(**kwargs: Any) -> FakeServer:
        servers.append(FakeServer(**kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def llamacpp_tokenize(body: dict) -> tuple[int, Any]:
    """llama.cpp: vLLM's form gets 200 with no tokens; its own form counts."""
    if "content" not in body:
        return 200, {"tokens": []}
    return 200, {"tokens": list(range(words(body["content"]) - (0 if body.get("add_special") else 1)))}


def test_a_form_that_counts_text_as_zero_tokens_is_never_taken(fake):
    server = fake(tokenize=llamacpp_tokenize)
    choice = choose_counter(requests.Session(), server.url, "m", "completions")
    assert choice.method == "server /tokenize (content, special tokens added), checked against usage.prompt_tokens"
    assert choice.rejected == ["/tokenize (prompt) counted 0 tokens for non-empty text"]
    assert choice.count(PROBE_TEXT) == words(PROBE_TEXT)
    assert server.probes == 1  # one 1-token request: the reference


def test_a_form_the_usage_contradicts_is_not_taken(fake):
    server = fake(tokenize=lambda body: (200, {"count": words(body.get("prompt", "")) + 3}))
    choice = choose_counter(requests.Session(), server.url, "m", "completions")
    assert choice.method == "usage.prompt_tokens of 1-token requests"
    assert choice.rejected == [f"/tokenize (prompt) counted {words(PROBE_TEXT) + 3} tokens where usage.prompt_tokens "
                               f"says {words(PROBE_TEXT)}"]
    assert choice.count("one two three") == 4


def test_no_tokenize_sizes_from_usage_and_never_sends_much_more_than_the_prompt(fake):
    server = fake(tokenize=None)
    book = PromptBook(requests.Session(), server.url, "m")
    template = book.template("completions", 300)
    assert template.tokens == 300 and book.describe() == "usage.prompt_tokens of 1-token requests"
    longest = max(words(b["prompt"]) for b in server.completions)
    assert longest <= 1.25 * 300  # every count a request: none of them far beyond the prompt (or the context)


def test_a_server_without_usage_is_a_one_line_error(fake):
    server = fake(tokenize=None, usage=lambda text: None)
    with pytest.raises(ServerError, match=r"^cannot size prompts: a 1-token request to .* got its stream carried no "
                                          r"usage.prompt_tokens$"):
        choose_counter(requests.Session(), server.url, "m", "completions")


def test_a_counter_that_never_grows_stops_long_before_any_server_limit():
    calls = []

    def stuck(text: str) -> int:
        calls.append(len(text))
        return 3

    with pytest.raises(ServerError, match="sizing a 200-token prompt did not converge: the server counted 3 tokens"):
        build_template(200, stuck)
    assert len(calls) < 10 and max(calls) < 20_000  # a few tries, kilobytes: never the 100 MB llama.cpp refuses


def test_request_ids_are_written_so_that_every_id_counts_the_same():
    def merges_zeros(text: str) -> int:  # a tokenizer that merges "00" runs: ids of the same width count apart
        return len(text.replace("00", "Z").split()) + sum(1 for c in text.replace("00", "Z") if c.isdigit() or c == "Z")

    assert id_style_for(words) == ("plain", 0)  # one token per word: the plain id is already even
    style, spread = id_style_for(merges_zeros)
    assert (style, spread) == ("spaced", 0)


def test_fields_the_server_refuses_are_left_out_and_said(fake):
    server = fake(tokenize=None, refuse=("ignore_eos", "min_tokens"))
    dialect = agree(requests.Session(), server.url, model="m", endpoint="completions", adapter=OpenAIAdapter())
    assert dialect.length_fields == ["generation_config"]
    assert set(dialect.rejected) == {"ignore_eos", "min_tokens"}
    assert all(why.startswith("HTTP 422: ") for why in dialect.rejected.values())
    llama = fake(tokenize=llamacpp_tokenize)
    dialect = agree(requests.Session(), llama.url, model="m", endpoint="completions", adapter=LlamaCppAdapter())
    assert (dialect.length_fields, dialect.cold_fields, dialect.rejected) == (["ignore_eos"], {"cache_prompt": False},
                                                                              {})
    assert llama.completions[-1]["ignore_eos"] is True and llama.completions[-1]["cache_prompt"] is False
