"""What a kind is: the record of its program, its judge, its prompt plan and its traits (:class:`Kind`).

Every kind's folder (:mod:`cardgen.kinds.closed` ...) makes one :class:`Kind`; the registry
(:mod:`cardgen.kinds`) lists them. This module knows no kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ConfigDict

from cardgen.kinds.program import Judge, Program, Send
from cardgen.kinds.view import Params, PointView

# what a point's ``parallel`` is
USERS = "users"  # the requests it keeps in flight by design (users, a batch)
LARGEST_GROUP = "largest group"  # the largest group of requests it sends at once (``Kind.largest``)
NO_PARALLEL = ""  # nothing: its load is a rate, a sweep or a search

# every kind's params type (a frozen pydantic dataclass, one per kind, told apart by ``kind``: the registry's
# ``KindParams``) is made with this config: a field no kind has is an error
PARAMS_CONFIG = ConfigDict(extra="forbid")

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Shared:
    """Tokens at the head of a prompt that other prompts share: ``tokens`` tokens, the same for every prompt whose
    span has the same ``key`` (one point's prefix, one trace block: another point's or another run's never match)."""

    key: tuple[Any, ...]
    tokens: int


def _own(point: PointView, send: Send) -> tuple[Shared, ...]:
    return ()


def _none(point: Params[Any]) -> int:
    return 0


def _no_target(point: Params[Any]) -> float | None:
    return None


def _never(point: Params[Any]) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class ReplayBudget:
    """What a replay on a fitted server may spend on a point (a calibrated card's virtual evaluations,
    :mod:`cardgen.calibrated.replay`): ``rounds`` rounds of its users and at least ``min_requests`` requests, or a
    measured point's own ``requests``, replayed as it ran."""

    rounds: int
    min_requests: int
    requests: int | None = None


INGESTION = "ingestion"  # the headline of prompt ingestion speed (see :attr:`Kind.headlines`)
GENERATION = "generation"  # the headline of generation speed at N parallel requests (see :attr:`Kind.headlines`)


@dataclass(frozen=True, slots=True)
class Sweep:
    """How a kind's serving points line up in the views that compare loads across kinds: what its lines are called,
    the axis its points are ordered along, and which of its summary rows (``ScenarioSummary``) are drawn."""

    name: str  # its lines' name ("closed loop")
    axis: str  # the load axis in words ("parallel requests")
    order: Callable[[Any], float]  # a row's place along the axis
    label: Callable[[Any], str]  # a row's tick label
    shown: Callable[[Any], bool]  # whether a row is drawn


@dataclass(frozen=True)
class Kind(Generic[P]):
    """One scenario kind's traits. The booleans say which of cardgen's views a kind's points belong to."""

    name: str
    description: str = ""  # one line: what its points measure (``cardgen kinds``)
    # its suite entry (an :class:`cardgen.kinds.entry.Entry` whose ``kind`` is a Literal of ``name``) and its
    # points' params (a frozen pydantic dataclass made with :data:`PARAMS_CONFIG`, ``kind`` defaulting to ``name``):
    # the registry joins every installed kind's into the unions a suite and a point are read with
    entry: type[Any] | None = None
    params: type[Any] | None = None
    # its program (what a point sends and when it stops: cardgen.kinds.program) and the judge of its records where
    # every process's meet (a kind whose figures are judged across processes; the plain Judge counts them)
    program: type[Program] | None = None
    judge: type[Judge] = Judge
    parallel: str = NO_PARALLEL  # what a point's ``parallel`` is (USERS, LARGEST_GROUP or NO_PARALLEL)
    # how the card words a point's load: ``parallel`` and ``rate`` (the rate in words) are filled in
    load_words: str = "one at a time"
    # how its points line up where cardgen compares loads across kinds (None: its points are no serving load):
    # the throughput-latency and latency-percentile figures, cost, energy, FastGen's table, the site's tables
    sweep: Sweep | None = None
    # whether its points hold ``parallel`` users in flight from a ramp to a drain, so that their figures are their
    # steady requests' (the ramp and the drain cut and counted: cardgen.analysis.scenarios) and the server's own
    # latencies over each point's window are set beside the client's (cardgen.analysis.crosscheck)
    steady_window: bool = False
    # the card's headline figures its points give, by the headline's name (:data:`INGESTION`: prompt ingestion
    # speed, the fit of TTFT against prompt tokens over points that compute whole prompts, one request at a time;
    # :data:`GENERATION`: the speed per request at N parallel users, whose points calibration fits the decode step
    # on). The core asks for a headline's points through :func:`cardgen.kinds.kinds_giving`, never by a kind's
    # name, so any kind may give one and deleting the kind that gives it leaves the headline stated as not measured
    headlines: frozenset[str] = frozenset()
    # whether its figures are the client's timings (False: they are what the server says of its load, queueing
    # and preemption, so a client that fell behind spoils none of them: the client check leaves its points out)
    client_timed: bool = True
    shared_prefix: bool = False  # its requests share prefixes it makes (the prefix-cache view)
    # whether the shared saturation watch (cardgen.saturation) reads the server while its points run: the point's
    # outcome then says whether it saturated the server (run.json ``saturation``, the card's words, calibration's
    # check), and ``skip_after_saturation`` may skip its entry's larger counts. A kind whose load keeps users in
    # flight takes it; one that fills the server on purpose (the waves) or sends one request at a time does not
    watch_saturation: bool = False
    # what the kind does by design, which the card's notes and the saturation rules must not report as a fault:
    # the parts of TTFT its load makes large on purpose (``"queue"``: a load that fills the server to find where it queues)
    by_design: frozenset[str] = frozenset()
    # ... and what one of its points does by design beyond that, given its summary row (``all_at_once``: an open
    # loop at rate inf sends every request at once, so they queue on purpose)
    by_design_row: Callable[[Any], frozenset[str]] | None = None
    diff_rank: int | None = None  # where ``cardgen diff`` lists its points (None: it compares none)
    # whether ``cardgen diff`` tells its points apart by their names too (points whose own params, an image count
    # and size, say, are not among the lengths and loads every kind's point has: cardgen.points names a point by
    # its parameters, so the same suite's point has the same name in another run)
    diff_by_name: bool = False
    # calibration: replayed on the fitted server; its figures fitted and judged; a spot check's preference (the
    # lowest first) and what its load is called there
    replayed: bool = False
    fitted_figures: bool = False
    # ... why a calibrated build measures its first point rather than predicting it, given whether the server
    # declares its KV capacity (None: it is predicted; a point the fit cannot model is measured)
    measured_when: Callable[[bool], str | None] = lambda kv_declared: None
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
    # its prompt plan, the one both interpreters follow: what a request's prompt shares with others, from its head
    # (the load engine writes those spans as the same text, cardgen.datasets.resolve; the virtual server hashes
    # them as the same blocks, cardgen.sim.drive); the rest of the prompt is the request's own. A chat turn's
    # history is the rule of cardgen.kinds.history, which both interpreters keep
    shared_spans: Callable[[PointView, Send], tuple[Shared, ...]] = _own
    # a point's rules the interpreters and the controller ask: whether its saturating the server skips the larger
    # counts of its pair (``--run-saturated`` runs them), whether it replays a trace at its own times, whether each
    # later turn of its conversations renews the history's head (no prefix for the server to reuse: the chat
    # history rule, cardgen.kinds.history); its largest number of requests at once where that is not ``parallel``
    # (the largest group it sends at once)
    skip_after_saturation: Callable[[Params[P]], bool] = _never
    # the most streams a point keeps open at once over all load processes, given a stream's chunks per second
    # (how many worker processes ``--workers auto`` asks for: cardgen.load.workers); None: its users where its
    # ``parallel`` is USERS, else none counted
    streams: Callable[[PointView, float], int] | None = None
    replays: Callable[[Params[P]], bool] = _never
    renews_history: Callable[[PointView], bool] = _never
    largest: Callable[[Params[P]], int] | None = None
    # a prompt sweep's params (its own, or None for new ones) over other ``lengths``: a point whose longest prompts
    # do not fit the server's context keeps the ones that do; a calibrated card's ingestion probe, when the suite
    # has no sweep, is a new one swept once
    with_lengths: Callable[[P | None, tuple[int, ...]], P] | None = None
    # calibration: its params for a replay on a fitted server (a fixed small number of requests instead of its
    # stopping rule; None: it replays as the suite has it)
    cheap: Callable[[Params[P], ReplayBudget], Any] | None = None
    # its stages past the load, each named "module:attribute" (as an entry point is) and imported only when that
    # stage runs: they sit in the layers above this one, in the kind's own folder (or its own package)
    #   analysis  a cardgen.analysis.kindparts.KindAnalysis: its points' records -> its result, saved in
    #             summary.json's ``kinds`` under its name
    #   section   a cardgen.card.kindparts.KindSection: that result -> its part of the card (a template beside it),
    #             its rows of the card's main table and its words in the build's last line
    #   figures   a cardgen.figures.kindparts.KindFigures: that result -> its figures (PNG files of the run)
    #   diff      a cardgen.diff.kindparts.KindDiff: how ``cardgen diff`` resamples its points (None: request by
    #             request, their throughput the offered load's)
    analysis: str | None = None
    section: str | None = None
    figures: str | None = None
    diff: str | None = None
    # its requests' own shape (a cardgen.kinds.shape.RequestShape, "module:attribute"): what its requests carry
    # beyond a sized prompt, what the record keeps of their answers, what they cost the virtual server. None: plain
    # requests
    shape: str | None = None

    @property
    def serving_load(self) -> bool:
        """Whether a point's throughput is the server's at an offered load (users or a rate): the views that price
        or compare serving points (cost, energy, FastGen's table, the site's comparison tables)."""
        return self.sweep is not None

    def row_parallel(self, point: Params[Any]) -> int | None:
        """A point's parallel count as a summary row says it: its users (closed loop, batch, chat), its largest
        group sent at once (``largest``); None for a kind whose load is a rate, a sweep or a search."""
        if self.parallel == NO_PARALLEL:
            return None
        return self.largest(point) if self.largest is not None else point.parallel

    def designed(self, row: Any) -> frozenset[str]:
        """What the point of summary row ``row`` (a ``ScenarioSummary``) makes large by design: its kind's
        ``by_design`` and its own."""
        return self.by_design | (self.by_design_row(row) if self.by_design_row is not None else frozenset())

    def open_streams(self, point: PointView, chunks_s: float) -> int:
        """The most streams ``point`` keeps open at once (``streams``), a stream reading ``chunks_s`` chunks a
        second."""
        if self.streams is not None:
            return self.streams(point, chunks_s)
        return self.users(point) if self.parallel == USERS else 0

    def users(self, point: Params[Any]) -> int:
        """How many requests ``point`` keeps in flight at once by design; 1 for the others."""
        return (point.parallel or 1) if self.parallel == USERS else 1


def part(ref: str) -> Any:
    """The object a kind's ``"module:attribute"`` names (its analysis, its section), imported now."""
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for name in attr.split(".") if attr else ():
        obj = getattr(obj, name)
    return obj
