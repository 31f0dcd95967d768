"""What the kinds read of a point, typed by its shape (:class:`cardgen.points.Point` is made of the kinds' params,
one layer up, so no module here imports it): what a kind's rules read (:class:`Params`), what its program reads
(:class:`PointView`), and anything that names its kind (:class:`Kinded`)."""

from __future__ import annotations

from typing import Protocol, TypeVar

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


class PointView(Params[object], Protocol):
    """What a program reads of its point (:class:`cardgen.points.Point`, typed by its shape, so that a kind's folder
    imports no point: the points are made of the kinds' params, one layer up): the header's name, lengths, load,
    sample and adapters, and the kind's own params, narrowed by ``params_as``."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def rate_rps(self) -> float | None: ...
    @property
    def dataset(self) -> str | None: ...
    @property
    def items(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def adapters(self) -> tuple[str, ...]: ...
    @property
    def adapter_pick(self) -> str: ...
    def params_as(self, cls: type[P]) -> P: ...
    def item_lengths(self, number: int) -> tuple[int, int]: ...


class Kinded(Protocol):
    """Anything that names its kind: a point, a scenario's summary, a point's outcome."""

    @property
    def kind(self) -> str: ...
