"""The virtual server's reasoning model: the first share of every output is thinking, streamed as vLLM streams a
reasoning model.

- ``/v1/chat/completions`` (a reasoning parser, vLLM's ``--reasoning-parser``): the first R output tokens are
  ``delta.reasoning``, the rest ``delta.content``; ``usage.completion_tokens_details.reasoning_tokens`` is R.
- ``/v1/completions`` (no parser applies there, as in vLLM): the text carries the span. Token 1 is `` <think>``,
  the next R the reasoning, then `` </think>``, then the answer; ``usage`` says nothing of reasoning, and a client
  counts the span's words with ``/tokenize``: R (the tags are not counted, as vLLM's parsers count).

R = ``share`` x ``max_tokens``, rounded to the nearest token. The real-time server writes the stream from this
(:mod:`cardgen.sim.live`); the virtual-time driver builds the record a client would write from it
(:mod:`cardgen.sim.drive`): one rule for both clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN_TAG, CLOSE_TAG = " <think>", " </think>"


@dataclass(frozen=True, slots=True)
class Thinking:
    """How one request's ``max_tokens`` output tokens divide (token numbers from 1)."""

    reasoning_tokens: int  # R, as the server's usage or a client's /tokenize counts it
    last: int  # the last token of the reasoning part, its closing tag included (0: no reasoning)
    tags: bool  # the span is in the text (the completions endpoint)
    first_answer: int | None  # the answer's first token; None when the output ends inside the reasoning

    def is_reasoning(self, n: int) -> bool:
        """Whether output token ``n`` belongs to the reasoning part."""
        return n <= self.last

    def text_of(self, n: int, word: str) -> str:
        """Token ``n``'s text: its ``word``, or a tag of the span."""
        if self.tags and n == 1:
            return OPEN_TAG
        if self.tags and n == self.reasoning_tokens + 2:
            return CLOSE_TAG
        return word


NONE = Thinking(reasoning_tokens=0, last=0, tags=False, first_answer=1)


def thinking(share: float, max_tokens: int, *, chat: bool) -> Thinking:
    """How the virtual server divides an output of ``max_tokens`` tokens when ``share`` of it is reasoning."""
    if share <= 0 or max_tokens < 1:
        return NONE
    r = min(max_tokens, int(share * max_tokens + 0.5))
    if r == 0:
        return NONE
    if chat:
        return Thinking(reasoning_tokens=r, last=r, tags=False, first_answer=r + 1 if r < max_tokens else None)
    words = min(r, max_tokens - 1)  # the opening tag takes a token
    closed = words + 2 <= max_tokens
    return Thinking(reasoning_tokens=words, last=words + 2 if closed else max_tokens, tags=True,
                    first_answer=words + 3 if words + 3 <= max_tokens else None)
