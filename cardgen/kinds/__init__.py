"""Every scenario kind, listed once, each in a folder that owns all of it: what the rest of cardgen asks of a kind
instead of comparing its name.

A point's ``kind`` (``Point.kind``, ``ScenarioSummary.kind``, a record's ``kind``) names one :class:`Kind`
of :data:`KINDS`; :func:`kind_of` finds it. A module that treats some kinds apart asks a trait (``sweep``,
``steady_window``, ``headlines``, ``diff_rank`` ...) rather than testing names, so a new kind is one folder here and its name in
the lists below, not a hunt through every layer.

    kind.py       what a kind is (Kind: its program, its judge, its traits) and what its rules read of a point
    entry.py      what every suite entry shares (Entry, the dataset sources, SamplingParams)
    program.py    the language of the programs (Send, Watch, EndWatch; Program, Judge)
    view.py       what the kinds read of a point, typed by its shape (Params, PointView, Kinded)
    closed/ ...   one folder per built-in kind (pyproject.toml's entry points name them), each with
                  schema.py    its suite entry (:data:`Scenario`'s member) and its points' params (:data:`KindParams`')
                  program.py   its program: what a point sends and when it stops, with no clock and no socket
                  __init__.py  its traits (its :class:`Kind`)

A point is a common header and one kind's params (a pydantic union told apart by ``kind``:
:class:`cardgen.points.Point`), and its kind is its params'. Code that knows a point's kind (its program, a view
asked by a trait) narrows once (``Point.params_as``); a kind's rules read its params typed.

A replayed trace is no kind of its own: it is an open loop whose ``replay`` is set (its requests leave at the
trace's offsets instead of a rate's).

This package is plain data and clock-free rules, the lowest layer's (a rule in pyproject's import-linter config
keeps it from the clock, the sockets and the run directory), so every layer may ask it: :mod:`cardgen.suite`
reads a suite of its entries, :mod:`cardgen.points` makes points of its params, and :mod:`cardgen.scenarios`
runs its programs in both interpreters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Annotated, Any, TypeVar, Union

from pydantic import Field

from cardgen.kinds.entry import SamplingParams
from cardgen.kinds.kind import GENERATION, INGESTION, NO_PARALLEL, USERS, Kind, Sweep, part
from cardgen.kinds.program import Judge, Program
from cardgen.kinds.shape import RequestShape
from cardgen.kinds.view import Kinded, Params, PointView

K = TypeVar("K", bound=Kinded)
GROUP = "cardgen.kinds"  # the entry-point group every kind is installed under, cardgen's own included


def _installed() -> tuple[dict[str, Kind[Any]], dict[str, str], dict[str, str]]:
    """Every kind installed under :data:`GROUP`, by name, in the order the distributions list them (cardgen's
    first); the kinds that could not be loaded, with why; and where each came from (its distribution and module)."""
    found: dict[str, Kind[Any]] = {}
    broken: dict[str, str] = {}
    origin: dict[str, str] = {}
    eps = sorted(entry_points(group=GROUP), key=lambda ep: (ep.dist is None or ep.dist.name != "cardgen",))
    for ep in eps:
        if ep.name in found or ep.name in broken:
            continue  # the same kind twice on the path (an editable install beside a wheel): the first wins
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
        try:
            kind = ep.load()
        except Exception as exc:  # a plugin's own import error, whatever it is: reported, the other kinds still load
            broken[ep.name] = f"{ep.value} ({dist}) could not be loaded: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(kind, Kind) or kind.name != ep.name or kind.entry is None or kind.params is None:
            broken[ep.name] = (f"{ep.value} ({dist}) is not a Kind named {ep.name!r} with its entry and params "
                               "types")
            continue
        found[ep.name] = kind
        origin[ep.name] = f"{dist}, {ep.module}"
    return found, broken, origin


KINDS, BROKEN, ORIGIN = _installed()
UNKNOWN = Kind[Any]("unknown")  # a kind this cardgen does not know (a newer run's): in no view, no rule of its own
if not KINDS:  # an install without its entry points (a bare source tree on the path): nothing could run
    raise ImportError("no scenario kind is installed (entry-point group 'cardgen.kinds'): reinstall cardgen "
                      "(make install)")


def _union(types: list[type[Any]]) -> Any:
    return Annotated[Union[tuple(types)], Field(discriminator="kind")]  # noqa: UP007 - built from a runtime list


#: a suite's entry, by its kind (the YAML a suite declares: :class:`cardgen.suite.Suite`): every installed kind's
Scenario = _union([k.entry for k in KINDS.values() if k.entry is not None])
#: a point's own parameters, by its kind (``Point.params``): every installed kind's
KindParams = _union([k.params for k in KINDS.values() if k.params is not None])

__all__ = ["BROKEN", "GENERATION", "GROUP", "INGESTION", "KINDS", "NO_PARALLEL", "ORIGIN", "UNKNOWN", "USERS", "Kind", "KindParams",
           "Kinded", "Params", "SamplingParams", "Scenario", "Sweep", "gives", "judge_for", "kind_of", "kinds_giving", "kinds_where", "of_kind", "program_for",
           "request_shape", "runs_on"]

def kind_of(x: str | Kinded | None) -> Kind[Any]:
    """The kind ``x`` names (a kind's name, or anything with a ``kind``); :data:`UNKNOWN` for a name not listed."""
    name = x if x is None or isinstance(x, str) else x.kind
    return KINDS.get(name, UNKNOWN) if name is not None else UNKNOWN


def program_for(point: PointView, *, index: int = 0, parts: int = 1) -> Program:
    """The program of ``point``'s kind for process ``index`` of ``parts``."""
    program = kind_of(point).program
    if program is None:
        raise ValueError(f"point {point.name}: no program runs a {point.kind!r} point")
    return program(point, index=index, parts=parts)


def request_shape(point: PointView) -> RequestShape | None:
    """What ``point``'s kind's requests carry beyond a sized prompt (:mod:`cardgen.kinds.shape`); None: plain
    requests."""
    ref = kind_of(point).shape
    return _shape(ref) if ref is not None else None


@functools.cache
def _shape(ref: str) -> RequestShape:
    shape: RequestShape = part(ref)
    return shape


def judge_for(point: PointView) -> Judge:
    """The judge of ``point``'s records, where every process's meet."""
    return kind_of(point).judge(point)


def runs_on(point: PointView, index: int) -> bool:
    """Whether load-generating process ``index`` takes part in ``point`` (a barrier kind runs on process 0)."""
    program = kind_of(point).program
    return program is not None and program.runs_on(index)


def of_kind(name: str, items: Iterable[K]) -> list[K]:
    """The ``items`` (points, their summaries: anything with a ``kind``) of kind ``name``, in their order."""
    return [x for x in items if x.kind == name]


def kinds_where(trait: Callable[[Kind[Any]], bool]) -> tuple[str, ...]:
    """The names of the kinds with ``trait`` (for a frame's ``kind`` column: ``frame["kind"].isin(...)``)."""
    return tuple(k.name for k in KINDS.values() if trait(k))


def kinds_giving(headline: str) -> tuple[str, ...]:
    """The names of the installed kinds whose points give the card's ``headline`` (:attr:`Kind.headlines`)."""
    return kinds_where(lambda k: headline in k.headlines)


def gives(x: str | Kinded | None, headline: str) -> bool:
    """Whether ``x``'s kind (a kind's name, or anything with a ``kind``) gives the card's ``headline``."""
    return headline in kind_of(x).headlines
