"""Points: a suite's expansion into runs, and their names.

A point is one run of fixed parameters (e.g. the closed loop at 10 parallel users). :func:`expand` turns a
suite into points (each entry names its own: ``point_fields`` of :mod:`cardgen.suite`'s entries);
:func:`fit_context` leaves out what the server's context cannot hold. What a point's kind is (its traits, its
rules) is :mod:`cardgen.kinds`'; how it sends its requests and when it stops, its program's
(:mod:`cardgen.scenarios`).

A point is plain data (a dict-able dataclass) so it can travel to Locust workers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from cardgen.kinds import kind_of
from cardgen.suite import Suite


@dataclass(frozen=True)
class Point:
    """One point: plain, frozen data (what changes makes a new point: ``dataclasses.replace``)."""

    name: str
    kind: str  # one of cardgen.kinds.KINDS: what the rest of cardgen asks of the point's kind is there
    group: str
    endpoint: str
    timeout_s: float
    prompt_tokens: int = 0  # for ingest: see `lengths`
    output_tokens: int = 1
    parallel: int | None = None
    rate_rps: float | None = None
    # closed
    min_requests: int = 0
    min_duration_s: float = 0.0
    max_duration_s: float | None = None
    max_requests: int | None = None
    target_ci: float | None = None  # closed, ingest, batch: stop once the figure is this precise
    stop_at_saturation: bool = True  # closed: skip larger counts of the pair; waves: stop at saturation
    # open
    num_requests: int = 0
    seed: int = 0
    # waves
    max_wave: int = 0
    step: int = 1
    search: str = "step"  # waves: bisect | step
    resolution: int = 1  # waves, bisect: stop once the saturating size is known within this many requests
    # ingest
    lengths: tuple[int, ...] = ()
    repeats: int = 1
    # batch
    warmups: int = 0
    runs: int = 0
    max_runs: int | None = None
    # dataset (open loop): the requests are drawn from this dataset (cardgen.datasets); once sampled
    # (cardgen.datasets.resolve) ``items`` holds each request's [prompt tokens, output tokens] in send order
    dataset: str | None = None
    items: tuple[tuple[int, int], ...] = ()
    # shared prefix: ``prefixes`` prefixes of ``prefix_tokens``, each request one of them and a unique suffix of
    # ``suffix_tokens``; a cold pass then ``warm_rounds`` warm ones (``items``: each prefix's request lengths)
    prefixes: int = 0
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    warm_rounds: int = 0
    # chat: ``parallel`` users hold ``conversations`` conversations of ``turns`` turns; the first message is
    # ``prompt_tokens`` long, later ones ``message_tokens``; ``think_time_s`` between a reply and the next turn
    conversations: int = 0
    turns: int = 0
    message_tokens: int = 0
    think_time_s: float = 0.0
    fresh_history: bool = False  # chat: every turn's history starts with a new id (nothing for the cache to reuse)
    # LoRA: the adapters the point's requests ask for (their model names; none: the base model) and how each
    # request picks one (round-robin | random | per-user: cardgen.scenarios.program.Program.adapter)
    adapters: tuple[str, ...] = ()
    adapter_pick: str = "round-robin"
    # slo: the search's load (rate | parallel), its targets as (metric, percentile, threshold_s) (cardgen.slo), the
    # bracket's relative resolution, its first load and its bounds; min_requests / max_requests are per probe
    load: str = ""
    slo: tuple[tuple[str, float, float], ...] = ()
    slo_resolution: float = 0.0
    start_load: float = 0.0
    min_load: float = 0.0
    max_load: float = 0.0
    # a replayed trace (open loop, ``dataset`` a trace, no rate): its offsets are divided by ``speedup``; once read
    # (cardgen.datasets.resolve) ``offsets`` holds each request's seconds after the first, ``blocks`` the trace's
    # prompt blocks of ``block_tokens`` tokens it shares (by id) with other requests, and ``left_out`` the
    # trace's requests that could not be replayed (no answer, or beyond the server's context)
    replay: bool = False
    speedup: float = 1.0
    offsets: tuple[float, ...] = ()
    blocks: tuple[tuple[int, ...], ...] = ()
    block_tokens: int = 0
    left_out: int = 0

    def __post_init__(self) -> None:  # lists given (a suite, the wire) become tuples: nothing inside changes either
        object.__setattr__(self, "lengths", tuple(int(n) for n in self.lengths))
        object.__setattr__(self, "items", tuple((int(p), int(o)) for p, o in self.items))
        object.__setattr__(self, "adapters", tuple(str(a) for a in self.adapters))
        object.__setattr__(self, "slo", tuple((str(m), float(p), float(t)) for m, p, t in self.slo))
        object.__setattr__(self, "offsets", tuple(float(t) for t in self.offsets))
        object.__setattr__(self, "blocks", tuple(tuple(int(b) for b in ids) for ids in self.blocks))

    def to_wire(self) -> dict[str, Any]:
        data = asdict(self)
        if data["rate_rps"] is not None and math.isinf(data["rate_rps"]):
            data["rate_rps"] = "inf"
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Point:
        data = dict(data)
        if data.get("rate_rps") == "inf":
            data["rate_rps"] = math.inf
        return cls(**data)

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
        return max(self.lengths or (self.prompt_tokens,)) + self.output_tokens

    def users(self) -> int:
        """How many requests the point keeps in flight at once by design (a closed loop's users, a batch); 1 for
        the kinds whose load is a rate or a search (open loops, waves, SLO searches)."""
        return kind_of(self).users(self)

    @property
    def measures_prefill(self) -> bool:
        """Whether the point measures the engine computing whole prompts (an ingestion sweep): its requests ask the
        server not to take any of the prompt from its cache, where the engine has such a switch."""
        return kind_of(self).prefill_sweep

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
        if self.replay:
            return f"{self.dataset}|replay|{self.num_requests or 'all'} requests|{self.endpoint}"
        return f"{self.dataset}|seed {self.seed}|{self.num_requests} requests|{self.endpoint}"

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
    """Every point of the suite, in order: each entry's (:meth:`cardgen.suite.ClosedLoop.point_fields` ...) in
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
        if point.measures_prefill:
            lengths = [n for n in point.lengths if n + point.output_tokens <= max_model_len]
            if len(lengths) < len(point.lengths):
                warnings.append(f"{point.name}: prompts over {max_model_len - point.output_tokens} tokens left out "
                                f"(the server's max_model_len is {max_model_len})")
            if len(lengths) >= 2:
                kept.append(replace(point, lengths=tuple(lengths)))
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
            fit = sum(1 for n in point.lengths if n + point.output_tokens <= max_model_len)
            out[point.name] = (f"not run: {fit} of its {len(point.lengths)} prompt lengths fit the {max_model_len} "
                               f"tokens the server takes per request{where}, and a sweep needs two")
        else:
            out[point.name] = (f"not run: {point.prompt_tokens} prompt + {point.output_tokens} output tokens exceed "
                               f"the {max_model_len} tokens the server takes per request{where}")
    return out
