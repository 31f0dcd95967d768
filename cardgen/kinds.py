"""Every scenario kind, listed once: what the rest of cardgen asks of a kind instead of comparing its name.

A point's ``kind`` (``Point.kind``, ``ScenarioSummary.kind``, a record's ``kind``) names one :class:`Kind`
of :data:`KINDS`; :func:`kind_of` finds it. A module that treats some kinds apart asks a trait (``closed_loop``,
``rate_driven``, ``diff_rank`` ...) rather than testing names, so a new kind is one entry here (and its suite
entry, :mod:`cardgen.suite`, and its program, :mod:`cardgen.scenarios`), not a hunt through every layer.

A replayed trace is no kind of its own: it is an open loop whose ``replay`` is set (its requests leave at the
trace's offsets instead of a rate's).

The kinds' programs (how a point sends its requests, and when it stops) are :mod:`cardgen.scenarios`'; this
module is plain data, the lowest layer's, so every layer may ask it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# what a point's ``parallel`` is
USERS = "users"  # the requests it keeps in flight by design (users, a batch)
LARGEST_WAVE = "largest wave"  # waves: the largest wave (``Point.max_wave``)
NO_PARALLEL = ""  # nothing: its load is a rate, a sweep or a search


class Params(Protocol):
    """What a kind's rules read of a point (:class:`cardgen.points.Point`, which asks them here; typed by its
    shape, so this module imports no point)."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def parallel(self) -> int | None: ...
    @property
    def min_requests(self) -> int: ...
    @property
    def num_requests(self) -> int: ...
    @property
    def max_wave(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def lengths(self) -> tuple[int, ...]: ...
    @property
    def repeats(self) -> int: ...
    @property
    def warmups(self) -> int: ...
    @property
    def runs(self) -> int: ...
    @property
    def prefixes(self) -> int: ...
    @property
    def prefix_tokens(self) -> int: ...
    @property
    def suffix_tokens(self) -> int: ...
    @property
    def warm_rounds(self) -> int: ...
    @property
    def conversations(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def message_tokens(self) -> int: ...


class Kinded(Protocol):
    """Anything that names its kind: a point, a scenario's summary, a point's outcome."""

    @property
    def kind(self) -> str: ...


def _none(point: Params) -> int:
    return 0


@dataclass(frozen=True)
class Kind:
    """One scenario kind's traits. The booleans say which of cardgen's views a kind's points belong to."""

    name: str
    parallel: str = NO_PARALLEL  # what a point's ``parallel`` is (USERS, LARGEST_WAVE or NO_PARALLEL)
    # how the card words a point's load: ``parallel`` and ``rate`` (the rate in words) are filled in
    load_words: str = "one at a time"
    # a closed-loop sweep point (parallel users, per prompt / output pair): the headline, saturation and the
    # larger counts it skips, the steady state, the generation, scale, cost and trade-off views
    closed_loop: bool = False
    rate_driven: bool = False  # its load is an arrival rate (open loop): serving table, cost, latency figures
    prefill_sweep: bool = False  # a prompt-ingestion sweep: the prefill fit, computing whole prompts
    capacity_probe: bool = False  # probes the KV cache by what the server says (queueing, preemption)
    batched: bool = False  # rounds of a fixed batch: the batch table, precision and resampling by round
    shared_prefix: bool = False  # its requests share prefixes it makes (the prefix-cache view)
    conversation: bool = False  # multi-turn conversations (the chat view)
    slo_search: bool = False  # searches the highest load that meets an SLO
    diff_rank: int | None = None  # where ``cardgen diff`` lists its points (None: it compares none)
    # calibration: replayed on the fitted server; its figures fitted and judged; a spot check's preference (the
    # lowest first) and what its load is called there
    replayed: bool = False
    fitted_figures: bool = False
    spot_check: int | None = None
    check_load: str = ""
    # the precision a point reached, as the card says it: the PointPrecision fields, then a note
    precision: tuple[str, ...] = ()
    precision_note: str = ""
    # a point's rules: the requests it sends at least, its longest request (None: its prompts' longest plus its
    # output) and its sized prompts' lengths (None: its prompt_tokens)
    expected_requests: Callable[[Params], int] = _none
    longest_request: Callable[[Params], int] | None = None
    prompt_lengths: Callable[[Params], list[int]] | None = None

    @property
    def serving_load(self) -> bool:
        """Whether a point's throughput is the server's at an offered load (users or a rate): the views that price
        or compare serving points (cost, energy, FastGen's table, the site's comparison tables)."""
        return self.closed_loop or self.rate_driven

    def users(self, point: Params) -> int:
        """How many requests ``point`` keeps in flight at once by design; 1 for the others."""
        return (point.parallel or 1) if self.parallel == USERS else 1


def _chat_longest(p: Params) -> int:
    return p.prompt_tokens + max(0, p.turns - 1) * (p.message_tokens + p.output_tokens) + p.output_tokens


CLOSED = Kind(
    "closed", parallel=USERS, load_words="{parallel} parallel", closed_loop=True, diff_rank=0, replayed=True,
    fitted_figures=True, spot_check=0, check_load="parallel count", precision=("speed_from_start", "ttft"),
    expected_requests=lambda p: p.min_requests)
OPEN = Kind(
    "open", load_words="{rate}", rate_driven=True, diff_rank=1, replayed=True, fitted_figures=True, spot_check=2,
    check_load="rate", expected_requests=lambda p: p.num_requests)
WAVES = Kind(
    "waves", parallel=LARGEST_WAVE, load_words="waves up to {parallel}", capacity_probe=True,
    expected_requests=lambda p: sum(range(1, p.max_wave + 1, p.step)))
INGEST = Kind(
    "ingest", prefill_sweep=True, replayed=True, precision=("slope",), precision_note=" (slope)",
    expected_requests=lambda p: len(p.lengths) * p.repeats, prompt_lengths=lambda p: list(p.lengths))
BATCH = Kind(
    "batch", parallel=USERS, load_words="{parallel} parallel", batched=True, diff_rank=2, replayed=True,
    fitted_figures=True, spot_check=1, check_load="batch", precision=("decode",), precision_note=" (mean decode)",
    expected_requests=lambda p: (p.parallel or 1) * (p.warmups + p.runs))
PREFIX = Kind(
    "prefix", shared_prefix=True, expected_requests=lambda p: p.prefixes * (1 + p.warm_rounds),
    longest_request=lambda p: p.prefix_tokens + p.suffix_tokens + p.output_tokens)
CHAT = Kind(
    "chat", parallel=USERS, load_words="{parallel} parallel", conversation=True,
    expected_requests=lambda p: p.conversations * p.turns, longest_request=_chat_longest,
    prompt_lengths=lambda p: sorted({p.prompt_tokens, p.message_tokens}))
SLO = Kind("slo", slo_search=True, fitted_figures=True, expected_requests=lambda p: p.min_requests)

KINDS: dict[str, Kind] = {k.name: k for k in (CLOSED, OPEN, WAVES, INGEST, BATCH, PREFIX, CHAT, SLO)}
UNKNOWN = Kind("unknown")  # a kind this cardgen does not know (a newer run's): in no view, no rule of its own


def kind_of(x: str | Kinded | None) -> Kind:
    """The kind ``x`` names (a kind's name, or anything with a ``kind``); :data:`UNKNOWN` for a name not listed."""
    name = x if x is None or isinstance(x, str) else x.kind
    return KINDS.get(name, UNKNOWN) if name is not None else UNKNOWN


def kinds_where(trait: Callable[[Kind], bool]) -> tuple[str, ...]:
    """The names of the kinds with ``trait`` (for a frame's ``kind`` column: ``frame["kind"].isin(...)``)."""
    return tuple(k.name for k in KINDS.values() if trait(k))
