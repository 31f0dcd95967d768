"""Prompts of an exact token length, unique per request so prefix caching cannot help.

A prompt is ``"Request <id>. "`` + filler text, sized once per length against the server's own tokenizer
(``/tokenize``) or, where the server has none, against ``usage.prompt_tokens`` of 1-token requests. The id
has a fixed width of digits so every request of a length has the same token count; the records keep the
server's ``usage.prompt_tokens`` so any drift shows.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from cardgen.errors import ServerError

ID_SLOT = "\x00ID\x00"
#: the header of the requests cardgen sends before the load (sizing prompts, agreeing request fields): they are not
#: the load's, and a server that logs requests (the virtual server's stamp log) can tell them apart
PROBE_HEADER = "X-Cardgen-Probe"
GROWTH_LIMIT = 16  # words per target token beyond which a counter that still says "too short" is broken
_ID_EXAMPLE = "4821-07391564"

_WORDS = (
    "the system reads each line of the report and writes a short note about the state of every service in "
    "the cluster before the next shift begins while the operators compare latency with the budget they set "
    "for the week and decide which model to move to a larger machine when demand grows during the evening "
    "a careful engineer keeps the numbers honest and checks each figure against the raw data on disk so the "
    "team can trust the card they publish for others who plan their own deployments with limited hardware"
).split()


def filler_words(n: int, *, seed: int = 1234) -> list[str]:
    """Deterministic English-like filler: ``n`` words drawn from a small vocabulary."""
    rng = random.Random(seed)
    return [rng.choice(_WORDS) for _ in range(n)]


Counter = Callable[[str], int]  # text -> prompt tokens as the server counts them for this endpoint


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt of ``tokens`` tokens (as counted when built) with a slot for the request id."""

    tokens: int
    text: str  # contains ID_SLOT once

    def render(self, request_id: str) -> str:
        return self.text.replace(ID_SLOT, request_id, 1)


#: how a request id is written into its prompt: its digits as they are (``4821-07391564``), or each character
#: apart (``4 8 2 1 - 0 7 ...``) for a tokenizer that merges digit runs differently from one id to the next (a
#: byte-level BPE without digit splitting), where only characters apart count the same for every id
ID_STYLES = ("plain", "spaced")


def styled(raw: str, style: str = "plain") -> str:
    """The id ``raw`` as written in a prompt of ``style`` (:data:`ID_STYLES`)."""
    return " ".join(raw) if style == "spaced" else raw


def request_id(nonce: int, worker: int, counter: int, style: str = "plain") -> str:
    """Fixed-width id: ``NNNN-WWCCCCCC`` (same shape as ``_ID_EXAMPLE``), written in ``style``."""
    return styled(f"{nonce % 10_000:04d}-{worker % 100:02d}{counter % 1_000_000:06d}", style)


def id_style_for(count: Counter, *, samples: int = 12, seed: int = 0) -> tuple[str, int]:
    """The first id style (:data:`ID_STYLES`) in which the server counts every request id the same, and how many
    tokens the ids of the chosen style differ by at most (0 when one counts them all the same)."""
    rng = random.Random(seed)
    ids = [_ID_EXAMPLE] + [request_id(rng.randrange(10_000), rng.randrange(100), rng.randrange(1_000_000))
                           for _ in range(samples - 1)]
    spreads: dict[str, int] = {}
    for style in ID_STYLES:
        counts = {count(f"Request {styled(i, style)}. the") for i in ids}
        spreads[style] = max(counts) - min(counts)
        if spreads[style] == 0:
            return style, 0
    best = min(ID_STYLES, key=lambda st: spreads[st])
    return best, spreads[best]


def build_template(target: int, count: Counter, *, max_words: int | None = None, style: str = "plain") -> PromptTemplate:
    """The prompt whose token count is ``target`` (or the closest reachable), found by bisection on the
    number of filler words, then padded one short word at a time. Very short targets drop the word
    "Request"; a target shorter than the id alone gets the id alone (its count is then above the target)."""
    example = styled(_ID_EXAMPLE, style)
    prefix = f"Request {ID_SLOT}. "
    if count(prefix.replace(ID_SLOT, example)) > target:
        prefix = f"{ID_SLOT} "

    def text_for(words: list[str]) -> str:
        return (prefix + " ".join(words)).rstrip() if words else prefix.rstrip()

    def n_tokens(words: list[str]) -> int:
        return count(text_for(words).replace(ID_SLOT, example))

    if n_tokens([]) >= target:
        return PromptTemplate(tokens=n_tokens([]), text=text_for([]))
    words = filler_words(max_words or max(16, target * 2))
    counted = n_tokens(words)
    while counted < target:  # grow the pool if the tokenizer packs words tightly
        words += filler_words(max(16, len(words) // 4) if max_words else len(words), seed=len(words))
        grown = n_tokens(words)
        if grown <= counted or len(words) > GROWTH_LIMIT * max(16, target):
            raise ServerError(f"sizing a {target}-token prompt did not converge: the server counted {grown} tokens "
                              f"for {len(words)} words of text")
        counted = grown
    lo, hi = 0, len(words)
    while lo < hi:  # largest w with n_tokens(words[:w]) <= target
        mid = (lo + hi + 1) // 2
        if n_tokens(words[:mid]) <= target:
            lo = mid
        else:
            hi = mid - 1
    chosen = words[:lo]
    got = n_tokens(chosen)
    pad: list[str] = []
    for _ in range(8):  # pad with a short word until exact, a few tries
        if got == target:
            break
        if got < target:
            pad = pad + ["a"] * (target - got)
        else:
            pad = pad[: max(0, len(pad) - (got - target))]
        got = n_tokens(chosen + pad)
    return PromptTemplate(tokens=got, text=text_for(chosen + pad))


def dataset_template(prompt: str, count: Counter, *, style: str = "plain") -> PromptTemplate:
    """A dataset's own prompt with the request id before it (``"Request <id>. "``: prefix caching cannot
    reuse one request's prompt for the next), counted with the id in place."""
    text = f"Request {ID_SLOT}. {prompt}"
    return PromptTemplate(tokens=count(text.replace(ID_SLOT, styled(_ID_EXAMPLE, style))), text=text)


def id_tokens(count: Counter, *, style: str = "plain") -> int:
    """How many tokens the request id adds before a prompt (at least 0)."""
    return max(0, count(f"Request {styled(_ID_EXAMPLE, style)}. text") - count("text"))


def prefix_templates(*, prefixes: int, prefix_tokens: int, suffix_tokens: int, count: Counter,
                     tag: int, salt: str = "", style: str = "plain") -> list[PromptTemplate]:
    """Shared-prefix prompts: for each of ``prefixes`` prefixes, a shared text of ``prefix_tokens`` tokens (its
    own id at its start, made of the run's ``tag``, the point's ``salt`` and the prefix's number: another run's
    or another point's prefixes never match) then, on a new line, a unique suffix of ``suffix_tokens`` tokens
    that starts with the request id. Counted whole, with the id in place."""
    shared = build_template(prefix_tokens, count, style=style)
    suffix = build_template(suffix_tokens, count, style=style)
    point = zlib.crc32(salt.encode()) % 1000
    out = []
    for k in range(prefixes):
        text = shared.render(request_id(tag, 99, point * 1000 + k % 1000, style)) + "\n" + suffix.text
        out.append(PromptTemplate(tokens=count(text.replace(ID_SLOT, styled(_ID_EXAMPLE, style))), text=text))
    return out


def trace_templates(requests: list[tuple[int, tuple[int, ...]]], *, block_tokens: int, count: Counter, tag: int,
                    style: str = "plain") -> list[PromptTemplate]:
    """A replayed trace's prompts: for each request (its prompt tokens, and the ids of the trace's prompt blocks it
    shares), the text of each shared block (the same for every request that names that id: ``block_tokens``
    tokens with the block's own id at its start, made of the run's ``tag`` and the id: another run's blocks never
    match), then, on a new line, a unique tail that starts with the request id and fills the prompt to its length.
    Counted whole, with the id in place."""
    block = build_template(block_tokens, count, style=style) if any(ids for _, ids in requests) else None
    tails: dict[int, PromptTemplate] = {}
    out = []
    for tokens, ids in requests:
        shared = "".join(block.render(request_id(tag, h // 1_000_000, h, style)) + "\n" for h in ids) if block else ""
        length = max(1, tokens - len(ids) * block_tokens)
        if length not in tails:
            tails[length] = build_template(length, count, style=style)
        text = shared + tails[length].text
        out.append(PromptTemplate(tokens=count(text.replace(ID_SLOT, styled(_ID_EXAMPLE, style))), text=text))
    return out
