"""What a scenario's rules are told of a request that ended (a small typed :class:`Outcome`, not the stored
record), and the one place a request's figures are computed from its stamps (:class:`RequestFigures`).

The programs (:mod:`cardgen.scenarios`) and the rules' statistics (:mod:`cardgen.precision`, :mod:`cardgen.slo`)
read only when a request was sent, when its first token and its end arrived, its tokens and its chunks' times.
Each interpreter makes an :class:`Outcome` of the record it wrote (:meth:`Outcome.of`); the record itself, with its
37 fields, stays with the files.

**One request's figures.** The analysis (the card's per-request columns), the SLO verdict, the precision
stops, the kinds' judges and Locust's stats event all take a request's figures from :meth:`RequestFigures.of`,
so a point stops, and an SLO is judged, on the figures the card shows. Seconds, and tokens per second:

- ``end_at`` = the stream's end; its last text chunk's arrival when the end was not recorded
- ``elapsed_s`` = end - send, whatever the outcome (what the request took, failed or not: Locust's response
  time)
- ``ttft_s`` = first text chunk - send
- ``e2e_s`` = end - send
- ``tpot_s`` = (e2e - ttft) / (output tokens - 1)
- ``decode_tok_s`` = 1 / tpot
- ``speed_from_start_tok_s`` = output tokens / e2e
- ``itl_s``: the gaps between consecutive text chunks' arrivals (:func:`chunk_gaps_s`)

Every figure a request cannot give is NaN (ITL: no gaps), never a stand-in value:

- a failed request has no latency figure (``ttft_s``, ``e2e_s``, ``tpot_s``, the speeds NaN, no gaps); only
  ``elapsed_s``. A rule that counts a failure against a target (the SLO: a miss) says so itself, on top of
  these;
- an end never recorded falls back to the last chunk; with no chunk either, the end and what needs it are NaN;
- a one-token answer (or a server that gave no token count) has no TPOT and no decode speed; no count, or a
  count of 0, no speed from start;
- a decode time of 0 or less (every token in the first chunk) gives no TPOT and no decode speed, not 0 or inf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Stamps(Protocol):
    """A request's stamps and counts, as both a stored record and an :class:`Outcome` hold them."""

    @property
    def sent_at(self) -> float: ...
    @property
    def first_token_at(self) -> float | None: ...
    @property
    def end_at(self) -> float | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def chunk_times(self) -> Sequence[float]: ...


class Recorded(Stamps, Protocol):
    """What :meth:`Outcome.of` reads of a stored record (:class:`cardgen.schemas.records.RequestRecord`; typed
    by its shape, so the core's rules do not import the saved models): its stamps, its error and its prompt's
    count."""

    @property
    def error(self) -> object: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def prompt_tokens_target(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request as the rules see it once it has ended. Times are Unix seconds on the interpreter's clock."""

    ok: bool
    sent_at: float
    first_token_at: float | None
    end_at: float | None
    prompt_tokens: int  # the server's count (``usage``), else the target the request was sized to
    output_tokens: int | None  # the server's count; None when it gave none
    chunk_times: Sequence[float] = ()  # every text-bearing chunk's arrival (never changed: :func:`frozen_times`)
    # its figures, once asked for (every rule that reads them reads the same: computed once, not once a rule)
    _figures: RequestFigures | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def figures(self) -> RequestFigures:
        """Its figures (:class:`RequestFigures`), computed the first time they are asked for."""
        figures = self._figures
        if figures is None:
            figures = RequestFigures.of_stamped(self)
            object.__setattr__(self, "_figures", figures)  # frozen: its fields never change, so neither do they
        return figures

    @classmethod
    def of(cls, rec: Recorded) -> Outcome:
        return cls(ok=rec.error is None, sent_at=rec.sent_at, first_token_at=rec.first_token_at, end_at=rec.end_at,
                   prompt_tokens=rec.prompt_tokens if rec.prompt_tokens is not None else rec.prompt_tokens_target,
                   output_tokens=rec.output_tokens, chunk_times=frozen_times(rec.chunk_times))


def frozen_times(times: Sequence[float]) -> Sequence[float]:
    """Chunk times that nothing changes: a record read back holds a read-only array
    (:class:`cardgen.schemas.records.RecordSharer`), kept as it is; a list, as a tuple."""
    if isinstance(times, tuple) or (isinstance(times, np.ndarray) and not times.flags.writeable):
        return times
    return tuple(times)


# --- one request's figures -----------------------------------------------------------------------------------


class Stamped(Stamps, Protocol):
    """What a request's figures are computed from: its outcome and stamps (an :class:`Outcome`, or a
    :class:`cardgen.schemas.records.RequestRecord`, typed by its shape)."""

    @property
    def ok(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RequestFigures:
    """One request's figures (module docstring: their definitions, and NaN for each figure it cannot give)."""

    ok: bool
    end_at: float  # the end counted: the stream's end, else its last chunk
    elapsed_s: float  # end - send, failed or not
    ttft_s: float
    e2e_s: float
    tpot_s: float
    decode_tok_s: float
    speed_from_start_tok_s: float
    chunk_times: Sequence[float] = ()  # a successful request's text chunks' arrivals (a failed one: none)

    @property
    def itl_s(self) -> tuple[float, ...]:
        """The gaps between consecutive text chunks (:func:`chunk_gaps_s`); none for a failed request."""
        return tuple(chunk_gaps_s(self.chunk_times).tolist())

    @classmethod
    def of(cls, r: Stamped) -> RequestFigures:
        """The figures of ``r`` (an :class:`Outcome`, whose are computed once, or a stored record)."""
        return r.figures if type(r) is Outcome else cls.of_stamped(r)

    @classmethod
    def of_stamped(cls, r: Stamped) -> RequestFigures:
        """The figures of ``r`` computed from its stamps (:meth:`of` computes an outcome's once)."""
        return cls.from_stamps(ok=r.ok, sent_at=r.sent_at, first_token_at=r.first_token_at, end_at=r.end_at,
                               output_tokens=r.output_tokens, chunk_times=r.chunk_times)

    @classmethod
    def from_stamps(cls, *, ok: bool, sent_at: float, first_token_at: float | None, end_at: float | None,
                    output_tokens: int | None, chunk_times: Sequence[float] = ()) -> RequestFigures:
        """The figures of a request given its stamps one by one (the simulator's requests, which are no
        records)."""
        if end_at is None and len(chunk_times):
            end_at = chunk_times[-1]
        end = math.nan if end_at is None else float(end_at)
        elapsed = end - sent_at
        if not ok:
            return cls(ok=False, end_at=end, elapsed_s=elapsed, ttft_s=math.nan, e2e_s=math.nan,
                       tpot_s=math.nan, decode_tok_s=math.nan, speed_from_start_tok_s=math.nan)
        out = math.nan if output_tokens is None else float(output_tokens)
        ttft = math.nan if first_token_at is None else first_token_at - sent_at
        decode = elapsed - ttft
        tpot = decode / (out - 1) if out > 1 and decode > 0 else math.nan
        return cls(ok=True, end_at=end, elapsed_s=elapsed, ttft_s=ttft, e2e_s=elapsed, tpot_s=tpot,
                   decode_tok_s=1.0 / tpot if tpot > 0 else math.nan,
                   speed_from_start_tok_s=out / elapsed if elapsed > 0 and out >= 1 else math.nan,
                   chunk_times=frozen_times(chunk_times))


def chunk_gaps_s(chunk_times: Sequence[float] | np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """The gaps between consecutive text chunks' arrivals (a request's ITL, seconds; the analysis pools them
    from its frame's arrays, each request's written into its place of one array: ``out``, of one less than its
    chunks)."""
    times = np.asarray(chunk_times, dtype=float)
    gaps: np.ndarray = np.subtract(times[1:], times[:-1], out=out)  # np.diff, written where it is told
    return gaps
