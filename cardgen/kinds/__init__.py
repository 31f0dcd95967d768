"""Every scenario kind, listed once: what the rest of cardgen asks of a kind instead of comparing its name.

A point's ``kind`` (``Point.kind``, ``ScenarioSummary.kind``, a record's ``kind``) names one :class:`Kind`
of :data:`KINDS`; :func:`kind_of` finds it. A module that treats some kinds apart asks a trait (``closed_loop``,
``rate_driven``, ``diff_rank`` ...) rather than testing names, so a new kind is one module here and its name in
the lists below (and its program, :mod:`cardgen.scenarios`), not a hunt through every layer.

Each kind's module owns the kind: its suite entry (the YAML it reads, :data:`Scenario`'s members), the params of
its points (:data:`KindParams`'s members, a pydantic union told apart by ``kind``: a point is a common header and
one of them, :class:`cardgen.points.Point`, and its kind is its params') and its traits (its :class:`Kind`):

    kind.py       what a kind is (Kind, its traits) and what its rules read of a point (Params)
    entry.py      what every suite entry shares (Entry, the dataset sources, SamplingParams)
    closed.py ... one module per kind: closed, openloop, waves, ingest, batch, prefix, chat, slosearch

Code that knows a point's kind (its program, a view asked by a trait) narrows once (``Point.params_as``); a
kind's rules read its params typed.

A replayed trace is no kind of its own: it is an open loop whose ``replay`` is set (its requests leave at the
trace's offsets instead of a rate's).

The kinds' programs (how a point sends its requests, and when it stops) are :mod:`cardgen.scenarios`'; this
package is plain data, the lowest layer's, so every layer may ask it (:mod:`cardgen.suite` reads a suite of its
entries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from cardgen.kinds.batch import BATCH, BatchParams, BatchSweep
from cardgen.kinds.chat import CHAT, Chat, ChatParams
from cardgen.kinds.closed import CLOSED, ClosedLoop, ClosedParams
from cardgen.kinds.entry import SamplingParams
from cardgen.kinds.ingest import INGEST, Ingest, IngestParams
from cardgen.kinds.kind import LARGEST_WAVE, NO_PARALLEL, USERS, Kind, Kinded, Params
from cardgen.kinds.openloop import OPEN, OpenLoop, OpenParams
from cardgen.kinds.prefix import PREFIX, PrefixParams, SharedPrefix
from cardgen.kinds.slosearch import SLO, SloParams, SloSearch
from cardgen.kinds.waves import WAVES, Waves, WavesParams

KINDS: dict[str, Kind[Any]] = {k.name: k for k in (CLOSED, OPEN, WAVES, INGEST, BATCH, PREFIX, CHAT, SLO)}
UNKNOWN = Kind[Any]("unknown")  # a kind this cardgen does not know (a newer run's): in no view, no rule of its own

#: a suite's entry, by its kind (the YAML a suite declares: :class:`cardgen.suite.Suite`)
Scenario = Annotated[ClosedLoop | OpenLoop | Waves | Ingest | BatchSweep | SharedPrefix | Chat | SloSearch,
                     Field(discriminator="kind")]
#: a point's own parameters, by its kind (``Point.params``)
KindParams = Annotated[
    ClosedParams | OpenParams | WavesParams | IngestParams | BatchParams | PrefixParams | ChatParams | SloParams,
    Field(discriminator="kind")]

__all__ = ["KINDS", "LARGEST_WAVE", "NO_PARALLEL", "UNKNOWN", "USERS", "BatchParams", "ChatParams", "ClosedParams",
           "IngestParams", "Kind", "KindParams", "Kinded", "OpenParams", "Params", "PrefixParams", "SamplingParams",
           "Scenario", "SloParams", "WavesParams", "kind_of", "kinds_where"]


def kind_of(x: str | Kinded | None) -> Kind[Any]:
    """The kind ``x`` names (a kind's name, or anything with a ``kind``); :data:`UNKNOWN` for a name not listed."""
    name = x if x is None or isinstance(x, str) else x.kind
    return KINDS.get(name, UNKNOWN) if name is not None else UNKNOWN


def kinds_where(trait: Callable[[Kind[Any]], bool]) -> tuple[str, ...]:
    """The names of the kinds with ``trait`` (for a frame's ``kind`` column: ``frame["kind"].isin(...)``)."""
    return tuple(k.name for k in KINDS.values() if trait(k))
