"""Every scenario kind, listed once: what the rest of cardgen asks of a kind instead of comparing its name.

A point's ``kind`` (``Point.kind``, ``ScenarioSummary.kind``, a record's ``kind``) names one :class:`Kind`
of :data:`KINDS`; :func:`kind_of` finds it. A module that treats some kinds apart asks a trait (``closed_loop``,
``rate_driven``, ``diff_rank`` ...) rather than testing names, so a new kind is one entry here (its traits and
its params type, and its suite entry, :mod:`cardgen.suite`, and its program, :mod:`cardgen.scenarios`), not a hunt
through every layer.

Each kind's own parameters of a point are a frozen params type here (:class:`ClosedParams` ... :class:`SloParams`,
the members of :data:`KindParams`, a pydantic union told apart by ``kind``): a point is a common header and one of
them (:class:`cardgen.points.Point`), and its kind is its params'. Code that knows a point's kind (its program,
a view asked by a trait) narrows once (``Point.params_as``); a kind's rules here read them typed.

A replayed trace is no kind of its own: it is an open loop whose ``replay`` is set (its requests leave at the
trace's offsets instead of a rate's).

The kinds' programs (how a point sends its requests, and when it stops) are :mod:`cardgen.scenarios`'; this
module is plain data, the lowest layer's, so every layer may ask it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as params_dataclass

# what a point's ``parallel`` is
USERS = "users"  # the requests it keeps in flight by design (users, a batch)
LARGEST_WAVE = "largest wave"  # waves: the largest wave (``WavesParams.max_wave``)
NO_PARALLEL = ""  # nothing: its load is a rate, a sweep or a search

# -- each kind's own parameters of a point (``Point.params``) ---------------------------------------------------
# Frozen pydantic dataclasses, one per kind, told apart by ``kind`` (:data:`KindParams`, a discriminated union): a
# point travels to Locust workers inside a pydantic message and comes back as the same class. What every kind's
# point has (its lengths, its load, its dataset and adapters) is the point's header (:class:`cardgen.points.Point`).
_CONFIG = ConfigDict(extra="forbid")


@params_dataclass(frozen=True, config=_CONFIG)
class ClosedParams:
    """A closed loop's point: it runs until ``min_requests`` and ``min_duration_s``, then (with a ``target_ci``)
    until its figures are that precise; ``max_requests`` and ``max_duration_s`` stop it whatever the precision;
    ``stop_at_saturation`` skips the larger counts of its pair once it saturates the server."""

    kind: Literal["closed"] = "closed"
    min_requests: int = 0
    min_duration_s: float = 0.0
    max_duration_s: float | None = None
    max_requests: int | None = None
    target_ci: float | None = None
    stop_at_saturation: bool = True


@params_dataclass(frozen=True, config=_CONFIG)
class SamplingParams:
    """What a point drawing a dataset's sample adds (an open loop, an SLO search): ``num_requests`` requests
    sampled with ``seed`` (points with the same :meth:`sample_key` send the same requests)."""

    num_requests: int = 0
    seed: int = 0

    def sample_key(self, dataset: str | None, endpoint: str) -> str:
        """Which sample of ``dataset`` the point sends, on ``endpoint``."""
        return f"{dataset}|seed {self.seed}|{self.num_requests} requests|{endpoint}"


@params_dataclass(frozen=True, config=_CONFIG)
class OpenParams(SamplingParams):
    """An open loop's point: ``num_requests`` arrivals at the header's ``rate_rps``, or a replayed trace
    (``replay``; the header's ``dataset`` a trace, no rate): its offsets are divided by ``speedup``; once read
    (cardgen.datasets.resolve) ``offsets`` holds each request's seconds after the first, ``blocks`` the trace's
    prompt blocks of ``block_tokens`` tokens it shares (by id) with other requests, and ``left_out`` the
    trace's requests that could not be replayed (no answer, or beyond the server's context)."""

    kind: Literal["open"] = "open"
    replay: bool = False
    speedup: float = 1.0
    offsets: tuple[float, ...] = ()
    blocks: tuple[tuple[int, ...], ...] = ()
    block_tokens: int = 0
    left_out: int = 0

    def sample_key(self, dataset: str | None, endpoint: str) -> str:
        if self.replay:
            return f"{dataset}|replay|{self.num_requests or 'all'} requests|{endpoint}"
        return super().sample_key(dataset, endpoint)


@params_dataclass(frozen=True, config=_CONFIG)
class WavesParams:
    """Waves of 1, 2 ... ``max_wave`` requests at once: by ``step``, or (``search`` bisect) doubling until one
    saturates, then bisecting to within ``resolution`` requests; ``stop_at_saturation`` ends a stepped search
    there."""

    kind: Literal["waves"] = "waves"
    max_wave: int = 0
    step: int = 1
    stop_at_saturation: bool = True
    search: str = "step"  # bisect | step
    resolution: int = 1


@params_dataclass(frozen=True, config=_CONFIG)
class IngestParams:
    """An ingestion sweep: one request at a time of each prompt length of ``lengths``, ``repeats`` sweeps (with a
    ``target_ci``: at most, stopping once the slope is that precise)."""

    kind: Literal["ingest"] = "ingest"
    lengths: tuple[int, ...] = ()
    repeats: int = 1
    target_ci: float | None = None


@params_dataclass(frozen=True, config=_CONFIG)
class BatchParams:
    """A batch of the header's ``parallel`` requests: ``warmups`` rounds, then ``runs`` (with a ``target_ci``: on
    until the mean decode speed is that precise, at most ``max_runs``)."""

    kind: Literal["batch"] = "batch"
    warmups: int = 0
    runs: int = 0
    max_runs: int | None = None
    target_ci: float | None = None


@params_dataclass(frozen=True, config=_CONFIG)
class PrefixParams:
    """``prefixes`` prefixes of ``prefix_tokens``, each request one of them and a unique suffix of
    ``suffix_tokens``; a cold pass then ``warm_rounds`` warm ones (the header's ``items``: each prefix's request
    lengths, once sized)."""

    kind: Literal["prefix"] = "prefix"
    prefixes: int = 0
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    warm_rounds: int = 0


@params_dataclass(frozen=True, config=_CONFIG)
class ChatParams:
    """The header's ``parallel`` users hold ``conversations`` conversations of ``turns`` turns; the first message
    is the header's ``prompt_tokens`` long, later ones ``message_tokens``; ``think_time_s`` between a reply and the
    next turn; with ``fresh_history`` every turn's history starts with a new id (nothing for the cache to reuse)."""

    kind: Literal["chat"] = "chat"
    conversations: int = 0
    turns: int = 0
    message_tokens: int = 0
    think_time_s: float = 0.0
    fresh_history: bool = False


@params_dataclass(frozen=True, config=_CONFIG)
class SloParams(SamplingParams):
    """An SLO search: its load (rate | parallel), its targets as (metric, percentile, threshold_s)
    (cardgen.slo), the bracket's relative ``resolution``, its first load and its bounds; ``min_requests`` per
    probe, ``max_requests`` for the whole search; a dataset's sample as an open loop's (``num_requests``,
    ``seed``)."""

    kind: Literal["slo"] = "slo"
    load: str = ""
    slo: tuple[tuple[str, float, float], ...] = ()
    resolution: float = 0.0
    start_load: float = 0.0
    min_load: float = 0.0
    max_load: float = 0.0
    min_requests: int = 0
    max_requests: int | None = None


#: a point's own parameters, by its kind
KindParams = Annotated[
    ClosedParams | OpenParams | WavesParams | IngestParams | BatchParams | PrefixParams | ChatParams | SloParams,
    Field(discriminator="kind")]

P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)


class Params(Protocol[P_co]):
    """What a kind's rules read of a point (:class:`cardgen.points.Point`, which asks them here; typed by its
    shape, so this module imports no point): the header's lengths and users, and the kind's own ``params``."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def parallel(self) -> int | None: ...
    @property
    def params(self) -> P_co: ...


class Kinded(Protocol):
    """Anything that names its kind: a point, a scenario's summary, a point's outcome."""

    @property
    def kind(self) -> str: ...


def _none(point: Params[Any]) -> int:
    return 0


def _no_target(point: Params[Any]) -> float | None:
    return None


@dataclass(frozen=True)
class Kind(Generic[P]):
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
    # output), its sized prompts' lengths (None: its prompt_tokens) and the precision its figures stop at (a
    # kind with ``precision``: its ``target_ci``)
    expected_requests: Callable[[Params[P]], int] = _none
    longest_request: Callable[[Params[P]], int] | None = None
    prompt_lengths: Callable[[Params[P]], list[int]] | None = None
    target_ci: Callable[[Params[P]], float | None] = _no_target

    @property
    def serving_load(self) -> bool:
        """Whether a point's throughput is the server's at an offered load (users or a rate): the views that price
        or compare serving points (cost, energy, FastGen's table, the site's comparison tables)."""
        return self.closed_loop or self.rate_driven

    def users(self, point: Params[Any]) -> int:
        """How many requests ``point`` keeps in flight at once by design; 1 for the others."""
        return (point.parallel or 1) if self.parallel == USERS else 1


def _chat_longest(p: Params[ChatParams]) -> int:
    chat = p.params
    return p.prompt_tokens + max(0, chat.turns - 1) * (chat.message_tokens + p.output_tokens) + p.output_tokens


CLOSED = Kind[ClosedParams](
    "closed", parallel=USERS, load_words="{parallel} parallel", closed_loop=True, diff_rank=0, replayed=True,
    fitted_figures=True, spot_check=0, check_load="parallel count", precision=("speed_from_start", "ttft"),
    expected_requests=lambda p: p.params.min_requests, target_ci=lambda p: p.params.target_ci)
OPEN = Kind[OpenParams](
    "open", load_words="{rate}", rate_driven=True, diff_rank=1, replayed=True, fitted_figures=True, spot_check=2,
    check_load="rate", expected_requests=lambda p: p.params.num_requests)
WAVES = Kind[WavesParams](
    "waves", parallel=LARGEST_WAVE, load_words="waves up to {parallel}", capacity_probe=True,
    expected_requests=lambda p: sum(range(1, p.params.max_wave + 1, p.params.step)))
INGEST = Kind[IngestParams](
    "ingest", prefill_sweep=True, replayed=True, precision=("slope",), precision_note=" (slope)",
    expected_requests=lambda p: len(p.params.lengths) * p.params.repeats,
    prompt_lengths=lambda p: list(p.params.lengths), target_ci=lambda p: p.params.target_ci)
BATCH = Kind[BatchParams](
    "batch", parallel=USERS, load_words="{parallel} parallel", batched=True, diff_rank=2, replayed=True,
    fitted_figures=True, spot_check=1, check_load="batch", precision=("decode",), precision_note=" (mean decode)",
    expected_requests=lambda p: (p.parallel or 1) * (p.params.warmups + p.params.runs),
    target_ci=lambda p: p.params.target_ci)
PREFIX = Kind[PrefixParams](
    "prefix", shared_prefix=True, expected_requests=lambda p: p.params.prefixes * (1 + p.params.warm_rounds),
    longest_request=lambda p: p.params.prefix_tokens + p.params.suffix_tokens + p.output_tokens)
CHAT = Kind[ChatParams](
    "chat", parallel=USERS, load_words="{parallel} parallel", conversation=True,
    expected_requests=lambda p: p.params.conversations * p.params.turns, longest_request=_chat_longest,
    prompt_lengths=lambda p: sorted({p.prompt_tokens, p.params.message_tokens}))
SLO = Kind[SloParams]("slo", slo_search=True, fitted_figures=True, expected_requests=lambda p: p.params.min_requests)

KINDS: dict[str, Kind[Any]] = {k.name: k for k in (CLOSED, OPEN, WAVES, INGEST, BATCH, PREFIX, CHAT, SLO)}
UNKNOWN = Kind[Any]("unknown")  # a kind this cardgen does not know (a newer run's): in no view, no rule of its own


def kind_of(x: str | Kinded | None) -> Kind[Any]:
    """The kind ``x`` names (a kind's name, or anything with a ``kind``); :data:`UNKNOWN` for a name not listed."""
    name = x if x is None or isinstance(x, str) else x.kind
    return KINDS.get(name, UNKNOWN) if name is not None else UNKNOWN


def kinds_where(trait: Callable[[Kind[Any]], bool]) -> tuple[str, ...]:
    """The names of the kinds with ``trait`` (for a frame's ``kind`` column: ``frame["kind"].isin(...)``)."""
    return tuple(k.name for k in KINDS.values() if trait(k))
