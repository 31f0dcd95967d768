"""Points: a suite's expansion into runs, and their names.

A point is one run of fixed parameters (e.g. the closed loop at 10 parallel users). :func:`expand` turns a
suite into points (each entry names its own: ``point_fields`` of its kind's entry, :mod:`cardgen.kinds`);
:func:`fit_context` leaves out what the server's context cannot hold. What a point's kind is (its traits, its
rules) is :mod:`cardgen.kinds`'; how it sends its requests and when it stops, its program's
(:mod:`cardgen.scenarios`).

A point is plain data (a frozen pydantic dataclass: a header and its kind's params, :data:`cardgen.kinds.KindParams`)
so it can travel to Locust workers inside a pydantic message and come back with the same params class.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from cardgen.kinds import INGESTION, KindParams, SamplingParams, gives, kind_of
from cardgen.suite import Suite

P = TypeVar("P")


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Point:
    """One point: plain, frozen data (what changes makes a new point: ``dataclasses.replace``), a header every
    kind has and the kind's own ``params`` (:data:`cardgen.kinds.KindParams`; its ``kind`` is the point's).

    The header holds what code that knows no kind reads of any point: its name, group, endpoint and timeout; the
    lengths of its requests (``prompt_tokens``, ``output_tokens``: the sized prompt, a chat's first message, a
    shared prefix's whole prompt; an ingestion sweep's lengths are its params'), its load (``parallel``: users, a
    batch, the largest group sent at once; ``rate_rps``: an open loop's arrivals), which the records, the client's verdict and the
    card read whatever the kind; its dataset (an open loop's or an SLO search's) and, once sampled
    (:func:`cardgen.datasets.resolve`), ``items``, each request's [prompt tokens, output tokens] in send order (a
    dataset's sample, a shared prefix's requests), which the program base (``Program.item``) reads for every kind
    that brings its own prompts; and its LoRA adapters (any entry may ask for them)."""

    name: str
    group: str
    endpoint: str
    timeout_s: float
    params: KindParams
    prompt_tokens: int = 0  # for ingest: its params' ``lengths``
    output_tokens: int = 1
    parallel: int | None = None
    rate_rps: float | None = None
    dataset: str | None = None
    items: tuple[tuple[int, int], ...] = ()
    # LoRA: the adapters the point's requests ask for (their model names; none: the base model) and how each
    # request picks one (round-robin | random | per-user: cardgen.kinds.program.Program.adapter)
    adapters: tuple[str, ...] = ()
    adapter_pick: str = "round-robin"

    @property
    def kind(self) -> str:
        """The point's kind (one of :data:`cardgen.kinds.KINDS`): its params'."""
        return str(self.params.kind)

    def params_as(self, cls: type[P]) -> P:
        """The point's params as ``cls`` (a kind's program knows its kind); a TypeError when they are another
        kind's."""
        if not isinstance(self.params, cls):
            raise TypeError(f"point {self.name}: its params are a {self.kind} point's, not {cls.__name__}")
        return self.params

    @property
    def replay(self) -> bool:
        """Whether the point replays a trace at its own times (an open loop with ``replay`` set)."""
        return kind_of(self).replays(self)

    def expected_requests(self) -> int:
        """How many requests the point sends at least (for progress bars)."""
        return kind_of(self).expected_requests(self)

    def longest_request(self) -> int:
        """The most tokens one of the point's requests holds (prompt + output): what a server's context per request
        must take (a chat turn carries its conversation so far)."""
        longest = kind_of(self).longest_request
        if longest is not None:
            return longest(self)
        if self.items:
            return max(p + o for p, o in self.items)
        return max(self.prompt_lengths() or [self.prompt_tokens]) + self.output_tokens

    def target_ci(self) -> float | None:
        """The precision the point's figures stop at (closed loop, ingestion, batch: its params'), else None."""
        return kind_of(self).target_ci(self)

    def users(self) -> int:
        """How many requests the point keeps in flight at once by design (a closed loop's users, a batch); 1 for
        the kinds whose load is a rate or a search (open loops, probes, SLO searches)."""
        return kind_of(self).users(self)

    @property
    def measures_prefill(self) -> bool:
        """Whether the point measures the engine computing whole prompts (an ingestion sweep): its requests ask the
        server not to take any of the prompt from its cache, where the engine has such a switch."""
        return gives(self, INGESTION)

    @property
    def brings_prompts(self) -> bool:
        """Whether the point sends prompts of its own (a dataset's sample, shared prefixes), sampled before it
        runs (``cardgen.datasets.resolve``), rather than sized templates."""
        return self.dataset is not None or kind_of(self).shared_prefix

    def prompt_lengths(self) -> list[int]:
        """The lengths of the sized prompt templates the point sends (none for a dataset's own prompts)."""
        if self.brings_prompts:
            return []
        lengths = kind_of(self).prompt_lengths
        return lengths(self) if lengths is not None else [self.prompt_tokens]

    # -- dataset requests ------------------------------------------------------------------------------------
    def dataset_key(self) -> str:
        """Which sample of a dataset the point sends: points with the same key send the same requests (the
        rates of one suite entry)."""
        if not isinstance(self.params, SamplingParams):
            raise TypeError(f"point {self.name}: a {self.kind} point draws no dataset's sample")
        return self.params.sample_key(self.dataset, self.endpoint)

    def text_key(self) -> str:
        """Where the agents find the point's own prompt texts (``Setup.dataset_texts``): a dataset's sample
        (:meth:`dataset_key`), or a shared-prefix point's prefixes."""
        return self.dataset_key() if self.dataset is not None else f"{self.name}|prefixes"

    def item_lengths(self, number: int) -> tuple[int, int]:
        """A dataset point's request ``number``: (prompt tokens, output tokens) as sampled."""
        if not self.items:
            raise RuntimeError(f"{self.name}: its dataset was not sampled (cardgen.datasets.resolve)")
        prompt, output = self.items[number]
        return int(prompt), int(output)


def expand(suite: Suite) -> list[Point]:
    """Every point of the suite, in order: each entry's (:meth:`cardgen.kinds.closed.ClosedLoop.point_fields` ...) in
    its group, with the suite's endpoint and timeout where the entry gives none. Names are unique within the suite."""
    points: list[Point] = []
    for n, entry in enumerate(suite.scenarios):
        common = {"endpoint": entry.endpoint or suite.endpoint, "timeout_s": entry.timeout_s or suite.timeout_s}
        group = entry.name or f"{entry.kind}-{n + 1}"
        mine = [Point(group=group, **{**common, **fields}) for fields in entry.point_fields()]
        if entry.adapters:
            mine = with_adapters(mine, entry.adapters, entry.adapter_counts, entry.adapter_pick)
        points += mine
    seen: dict[str, int] = {}
    for i, point in enumerate(points):  # make names unique when two entries expand to the same parameters
        if point.name in seen:
            seen[point.name] += 1
            points[i] = replace(point, name=f"{point.name}-{seen[point.name]}")
        else:
            seen[point.name] = 1
    return points


def with_adapters(points: list[Point], adapters: list[str], counts: list[int] | None, pick: str) -> list[Point]:
    """An entry's points once per adapter count (``-a<N>``: its requests pick among the first N adapters; N = 0 is
    the base model), or with every adapter when no count is given."""
    out = []
    for point in points:
        for k in counts if counts is not None else [len(adapters)]:
            suffix = f"-a{k}" if counts is not None else ""
            out.append(replace(point, name=point.name + suffix, adapters=tuple(adapters[:k]), adapter_pick=pick))
    return out


def suite_adapters(points: list[Point]) -> tuple[str, ...]:
    """Every adapter the points ask for, in the order they first appear."""
    return tuple(dict.fromkeys(a for p in points for a in p.adapters))


def fit_context(points: list[Point], max_model_len: int | None) -> tuple[list[Point], list[str]]:
    """Leave out what cannot fit the server's context (prompt + output > ``max_model_len``): every such
    request would fail with HTTP 400. Returns the points to run and one warning per point changed."""
    if not max_model_len:
        return points, []
    kept: list[Point] = []
    warnings: list[str] = []
    for point in points:
        kind = kind_of(point)
        if point.measures_prefill and kind.with_lengths is not None:
            every = point.prompt_lengths()
            lengths = [n for n in every if n + point.output_tokens <= max_model_len]
            if len(lengths) < len(every):
                warnings.append(f"{point.name}: prompts over {max_model_len - point.output_tokens} tokens left out "
                                f"(the server's max_model_len is {max_model_len})")
            if len(lengths) >= 2:
                kept.append(replace(point, params=kind.with_lengths(point.params, tuple(lengths))))
            continue
        if point.prompt_tokens + point.output_tokens > max_model_len:
            warnings.append(f"{point.name} left out: {point.prompt_tokens} + {point.output_tokens} tokens exceed "
                            f"the server's max_model_len of {max_model_len}")
            continue
        kept.append(point)
    return kept, warnings


def left_out(points: list[Point], max_model_len: int | None, *, source: str | None = None) -> dict[str, str]:
    """The points :func:`fit_context` leaves out whole (none of their requests fits the server's context), each with
    why in one line: a measured run lists them as not run instead of sending requests that must fail."""
    if not max_model_len:
        return {}
    kept = {p.name for p in fit_context(points, max_model_len)[0]}
    where = f" ({source})" if source else ""
    out: dict[str, str] = {}
    for point in points:
        if point.name in kept:
            continue
        if point.measures_prefill:
            lengths = point.prompt_lengths()
            fit = sum(1 for n in lengths if n + point.output_tokens <= max_model_len)
            out[point.name] = (f"not run: {fit} of its {len(lengths)} prompt lengths fit the {max_model_len} "
                               f"tokens the server takes per request{where}, and a sweep needs two")
        else:
            out[point.name] = (f"not run: {point.prompt_tokens} prompt + {point.output_tokens} output tokens exceed "
                               f"the {max_model_len} tokens the server takes per request{where}")
    return out
