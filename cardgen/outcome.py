"""What a scenario's rules are told of a request that ended: a small typed outcome, not the stored record.

The programs (:mod:`cardgen.scenarios`) and the rules' statistics (:mod:`cardgen.precision`, :mod:`cardgen.slo`)
read only when a request was sent, when its first token and its end arrived, its tokens and its chunks' times.
Each interpreter makes an :class:`Outcome` of the record it wrote (:meth:`Outcome.of`); the record itself, with its
37 fields, stays with the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Recorded(Protocol):
    """What :meth:`Outcome.of` reads of a stored record (:class:`cardgen.schemas.records.RequestRecord`; typed
    by its shape, so the core's rules do not import the saved models)."""

    @property
    def error(self) -> object: ...
    @property
    def sent_at(self) -> float: ...
    @property
    def first_token_at(self) -> float | None: ...
    @property
    def end_at(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def prompt_tokens_target(self) -> int: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def chunk_times(self) -> Sequence[float]: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request as the rules see it once it has ended. Times are Unix seconds on the interpreter's clock."""

    ok: bool
    sent_at: float
    first_token_at: float | None
    end_at: float | None
    prompt_tokens: int  # the server's count (``usage``), else the target the request was sized to
    output_tokens: int | None  # the server's count; None when it gave none
    chunk_times: tuple[float, ...] = ()  # every text-bearing chunk's arrival

    @classmethod
    def of(cls, rec: Recorded) -> Outcome:
        return cls(ok=rec.error is None, sent_at=rec.sent_at, first_token_at=rec.first_token_at, end_at=rec.end_at,
                   prompt_tokens=rec.prompt_tokens if rec.prompt_tokens is not None else rec.prompt_tokens_target,
                   output_tokens=rec.output_tokens, chunk_times=tuple(rec.chunk_times))
