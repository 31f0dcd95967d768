"""The virtual server's tokenizer: deterministic, cheap, and consistent between ``/tokenize`` and ``usage``.

Rules (a client can rely on them):

- A text prompt has one token per whitespace-delimited word: ``len(text.split())``. A prompt given as a list
  of token ids has one token per id.
- A chat conversation costs :data:`CHAT_MESSAGE_OVERHEAD` tokens per message (role header and end marker)
  plus the words of its content (text parts only), plus :data:`CHAT_REPLY_OVERHEAD` tokens for the
  assistant header the template appends. ``/tokenize`` with ``messages`` and ``usage.prompt_tokens`` of a chat
  request use the same function, so they always agree.
- Generated text is one word with a leading space per token, drawn from :data:`OUTPUT_WORDS`, so the text of
  N generated tokens tokenizes back to N tokens.
- Token ids are stable: ``crc32(word) % VOCAB_SIZE``. ``/detokenize`` maps an id to ``OUTPUT_WORDS[id % n]``
  (the count round-trips, the words do not).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

VOCAB_SIZE = 32_000
CHAT_MESSAGE_OVERHEAD = 4  # <|start|>role<|sep|> ... <|end|>
CHAT_REPLY_OVERHEAD = 3  # <|start|>assistant<|sep|>
OUTPUT_WORDS: tuple[str, ...] = (
    "the", "model", "writes", "one", "word", "per", "token", "here", "and", "then", "some", "more",
    "text", "until", "it", "stops",
)  # fmt: skip


class PromptError(ValueError):
    """A prompt or a message list the tokenizer cannot read (the server answers 400)."""


def count_text(text: str) -> int:
    """Tokens in ``text``: one per whitespace-delimited word."""
    return len(text.split())


class _WordIds(dict[str, int]):
    """``crc32(word) % VOCAB_SIZE`` for each word seen, computed once: a prompt's words repeat, and hashing each
    word of an 8,192-token prompt anew cost the real-time server 9 ms before its prefill (a cost that grows with
    the prompt, so it bent the measured ingestion slope); looked up, 0.6 ms. Forgets everything past
    :data:`_MAX_WORDS` so a stream of unique words cannot grow it without bound."""

    def __missing__(self, word: str) -> int:
        if len(self) >= _MAX_WORDS:
            self.clear()
        token = self[word] = zlib.crc32(word.encode()) % VOCAB_SIZE
        return token


_MAX_WORDS = 1_000_000
_WORD_IDS = _WordIds()


def encode_text(text: str) -> list[int]:
    """Token ids of ``text``, one per word."""
    return list(map(_WORD_IDS.__getitem__, text.split()))


def decode_ids(ids: Sequence[int]) -> str:
    """Text for ``ids``: one output word per id (the count round-trips)."""
    n = len(OUTPUT_WORDS)
    return "".join(f" {OUTPUT_WORDS[int(i) % n]}" for i in ids)


def _prompt_text(prompt: Any) -> str | None:
    """A completions ``prompt``'s text: a string, or a list holding one string; None for anything else."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    return None


def prompt_ids(prompt: Any) -> list[int]:
    """Token ids of a completions ``prompt``: a string, or a list of token ids."""
    text = _prompt_text(prompt)
    if text is not None:
        return encode_text(text)
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)
    raise PromptError("prompt must be a string or a list of token ids")


def prompt_units(prompt: Any) -> Sequence[object]:
    """A completions ``prompt`` as one hashable unit per token (its words, or its token ids), for the prefix
    cache's block hashes: equal prompts give equal units, as :func:`prompt_ids` does, without looking each word
    up (an 8,192-token prompt: 0.8 ms, against 1.6 ms through the ids: a cost before the prefill that grows with
    the prompt bends the real-time server's ingestion slope)."""
    text = _prompt_text(prompt)
    return text.split() if text is not None else prompt_ids(prompt)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict):
                raise PromptError("message content parts must be objects")
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
        return " ".join(parts)
    raise PromptError("message content must be a string or a list of parts")


def _checked(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise PromptError("messages must be a non-empty list")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise PromptError("each message needs a string 'role'")
    return messages


def chat_ids(messages: Any) -> list[int]:
    """Token ids of a chat conversation rendered by the fixed template described in the module docstring."""
    ids: list[int] = []
    for message in _checked(messages):
        ids.extend([1, zlib.crc32(message["role"].encode()) % VOCAB_SIZE, 2])
        ids.extend(encode_text(_content_text(message.get("content"))))
        ids.append(3)
    ids.extend([1, zlib.crc32(b"assistant") % VOCAB_SIZE, 2])
    return ids


def count_prompt(prompt: Any) -> int:
    """Tokens of a completions ``prompt`` (the same as ``len(prompt_ids(prompt))``, without hashing words)."""
    if isinstance(prompt, str):
        return count_text(prompt)
    return len(prompt_ids(prompt))


def count_chat(messages: Any) -> int:
    """Prompt tokens of a chat conversation (the same as ``len(chat_ids(messages))``, without hashing words)."""
    checked = _checked(messages)
    words = sum(count_text(_content_text(m.get("content"))) for m in checked)
    return words + CHAT_MESSAGE_OVERHEAD * len(checked) + CHAT_REPLY_OVERHEAD
