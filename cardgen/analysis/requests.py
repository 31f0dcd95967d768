"""Per-request metrics from the raw records (cardgen's names; formulas in the card's Method section).

A request's own figures are :class:`cardgen.outcome.RequestFigures` (its docstring defines them and their edge
cases), the same the stops and the SLO verdict read:

- ``ttft_s`` = first text chunk - send
- ``e2e_s`` = end of stream - send
- ``tpot_s`` = (e2e - ttft) / (output tokens - 1)
- ``decode_tok_s`` = 1 / tpot
- ``speed_from_start_tok_s`` = output tokens / e2e
- per-chunk gaps (ITL): differences of consecutive text-chunk arrival times

and the analysis adds:

- ``send_lag_s`` = send - scheduled send (open loop)

A reasoning model's stream (reasoning chunks count as text chunks above: TTFT is its first thinking token):

- ``ttfa_s`` = the answer's first chunk - send (NaN when the output ended before the answer began)
- ``answer_tokens`` = output tokens - reasoning tokens
- ``reasoning_tok_s`` = reasoning tokens / (TTFA - TTFT): the tokens generated from the first one to the answer's
  first, over that time; (reasoning tokens - 1) / (E2E - TTFT) when the answer never began
- ``answer_tok_s`` = (answer tokens - 1) / (E2E - TTFA): the answer's decode speed

Token counts are the server's (``usage``; reasoning: ``completion_tokens_details.reasoning_tokens``, else the
server's ``/tokenize`` of the reasoning text); chunks are never counted as tokens.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable

import numpy as np
import pandas as pd

from cardgen.outcome import RequestFigures, chunk_gaps_s
from cardgen.schemas.records import RequestRecord

COLUMNS = (
    "scenario", "kind", "group", "endpoint", "parallel", "rate_rps", "repeat", "warmup", "attempt",
    "prompt_tokens_target", "output_tokens_target", "prompt_tokens", "output_tokens",
    "index", "line", "scheduled_at", "sent_at", "first_token_at", "end_at", "recorded_end_at", "ok", "error_kind",
    "ttft_s", "e2e_s", "tpot_s", "decode_tok_s", "speed_from_start_tok_s", "send_lag_s", "n_chunks",
    "chunk_times", "item", "prefix", "phase", "conversation", "turn",
    "adapter", "ttfa_s", "reasoning_tokens", "answer_tokens", "reasoning_tok_s", "answer_tok_s", "reasoning_chunks",
    "reasoning_tokens_source", "cached_tokens", "length_forced",
    "engine_source", "engine_queue_ms", "engine_prompt_n", "engine_prompt_ms", "engine_predicted_n",
    "engine_predicted_ms", "engine_cache_n", "engine_mean_itl_ms", "extra", "worker",
)

_NAN = float("nan")


def _num(value: float | int | None) -> float:
    return _NAN if value is None else float(value)


def request_row(rec: RequestRecord) -> dict[str, object]:
    """One record as a flat row with its derived metrics (NaN where an input is missing)."""
    sent = rec.sent_at
    figures = RequestFigures.of(rec)
    out = _num(rec.output_tokens)
    ok = figures.ok
    return {
        "scenario": rec.scenario, "kind": rec.kind, "group": rec.group, "endpoint": rec.endpoint,
        "parallel": _num(rec.parallel), "rate_rps": _num(rec.rate_rps),
        "repeat": _num(rec.repeat), "warmup": bool(rec.warmup), "attempt": int(rec.attempt),
        "prompt_tokens_target": rec.prompt_tokens_target, "output_tokens_target": rec.output_tokens_target,
        "prompt_tokens": _num(rec.prompt_tokens), "output_tokens": out,
        "index": int(rec.index), "line": -1,  # its place in the file: set by request_frame
        "scheduled_at": _num(rec.scheduled_at), "sent_at": sent, "first_token_at": _num(rec.first_token_at),
        "end_at": figures.end_at, "recorded_end_at": _num(rec.end_at),
        "ok": ok, "error_kind": str(rec.error_kind) if rec.error_kind is not None else ("" if ok else "unknown"),
        "ttft_s": figures.ttft_s, "e2e_s": figures.e2e_s, "tpot_s": figures.tpot_s,
        "decode_tok_s": figures.decode_tok_s, "speed_from_start_tok_s": figures.speed_from_start_tok_s,
        "send_lag_s": sent - rec.scheduled_at if rec.scheduled_at is not None else _NAN,
        "n_chunks": len(rec.chunk_times),
        "chunk_times": np.asarray(rec.chunk_times, dtype=float),
        "item": _num(rec.item), "prefix": _num(rec.prefix), "phase": rec.phase or "",
        "conversation": _num(rec.conversation), "turn": _num(rec.turn),
        "adapter": rec.adapter or "", "length_forced": rec.length_forced is not False, **_reasoning(rec, figures.ttft_s, figures.e2e_s, out),
        "cached_tokens": _num(rec.cached_tokens), **_engine(rec),
        "extra": rec.extra,  # its kind's own fields (a dict, or None): only that kind's analysis reads them
        "worker": rec.worker,  # the load process that sent it ("local": the master's own)
    }


def _engine(rec: RequestRecord) -> dict[str, object]:
    """The engine's own account of the request (llama.cpp's ``timings``, vLLM's ``metrics``), NaN where it gave
    none."""
    t = rec.engine_timings
    if t is None:
        return {"engine_source": "", "engine_queue_ms": _NAN, "engine_prompt_n": _NAN, "engine_prompt_ms": _NAN,
                "engine_predicted_n": _NAN, "engine_predicted_ms": _NAN, "engine_cache_n": _NAN,
                "engine_mean_itl_ms": _NAN}
    return {"engine_source": t.source or "", "engine_queue_ms": _num(t.queue_ms), "engine_prompt_n": _num(t.prompt_n),
            "engine_prompt_ms": _num(t.prompt_ms), "engine_predicted_n": _num(t.predicted_n),
            "engine_predicted_ms": _num(t.predicted_ms), "engine_cache_n": _num(t.cache_n),
            "engine_mean_itl_ms": _num(t.mean_itl_ms)}


def _reasoning(rec: RequestRecord, ttft: float, e2e: float, out: float) -> dict[str, object]:
    """A record's reasoning columns (NaN where the record says nothing: a failed request, or an old record)."""
    ok = rec.error is None
    ttfa = _num(rec.first_answer_at) - rec.sent_at if ok else _NAN
    thought = _num(rec.reasoning_tokens) if ok else _NAN
    answer = out - thought
    if ttfa - ttft > 0:
        think_speed = thought / (ttfa - ttft)
    else:
        think_speed = (thought - 1) / (e2e - ttft) if math.isnan(ttfa) and thought > 1 and e2e > ttft else _NAN
    return {"ttfa_s": ttfa, "reasoning_tokens": thought, "answer_tokens": answer, "reasoning_tok_s": think_speed,
            "answer_tok_s": (answer - 1) / (e2e - ttfa) if answer > 1 and e2e > ttfa else _NAN,
            "reasoning_chunks": _num(rec.reasoning_chunks) if ok else _NAN,
            "reasoning_tokens_source": rec.reasoning_tokens_source or ""}


FRAME_PIECE = 8192  # records made into columns at a time: a long run's values are never all Python objects at once


def request_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Every record as a row of :data:`COLUMNS`, in send order (ties keep file order; ``line``: its place in
    ``records``, from 0). ``records`` is iterated once: a file read as it is iterated is never held whole."""
    them = iter(records)
    frame = RequestFrame()
    while piece := list(itertools.islice(them, FRAME_PIECE)):
        frame.add_piece(piece)
    return frame.frame()


class RequestFrame:
    """:func:`request_frame` of records given one at a time, as they are written (:meth:`add`): a build makes its
    records rows as it computes them, for its card, instead of reading them back. No record is held: each is made
    a row at once, its values appended to their columns, :data:`FRAME_PIECE` rows at a time made a frame."""

    def __init__(self) -> None:
        self._pieces: list[pd.DataFrame] = []
        self._rows: list[tuple[object, ...]] = []  # the rows added one at a time since the last piece

    def add(self, record: RequestRecord) -> None:
        """The next record (in the order of the file)."""
        self._rows.append(_in_columns(request_row(record)))
        if len(self._rows) >= FRAME_PIECE:
            self._piece()

    def add_piece(self, records: list[RequestRecord]) -> None:
        """The next records, made rows at once."""
        self._piece()
        self._pieces.append(_frame_piece(records))

    def _piece(self) -> None:
        """The rows added one at a time so far, made a frame."""
        if self._rows:
            self._pieces.append(_frame_of(self._rows))
            self._rows = []

    def frame(self) -> pd.DataFrame:
        """Every record so far as :func:`request_frame` makes them rows (it lets go of what it held)."""
        self._piece()
        pieces, self._pieces = self._pieces, []
        if not pieces:
            return _frame_piece([]).astype({"ok": bool, "warmup": bool, "attempt": int, "index": int, "line": int})
        df = pieces[0] if len(pieces) == 1 else pd.concat(pieces, ignore_index=True)
        df["line"] = np.arange(len(df))
        del pieces  # let go before the sort's copy: two copies of a long run's rows at most, not three
        return df.sort_values("sent_at", kind="stable").reset_index(drop=True)


_in_columns = operator.itemgetter(*COLUMNS)  # a row's values in the order of COLUMNS: never held as a dict


def _frame_piece(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Some records as rows of :data:`COLUMNS`, in file order."""
    return _frame_of([_in_columns(request_row(rec)) for rec in records])  # all at once (2 KB a row), their values


def _frame_of(rows: list[tuple[object, ...]]) -> pd.DataFrame:
    """Rows of :data:`COLUMNS` (each its values in their order) as a frame, built by column."""
    if not rows:
        return pd.DataFrame({c: [] for c in COLUMNS}, columns=list(COLUMNS))
    return pd.DataFrame(dict(zip(COLUMNS, map(list, zip(*rows, strict=True)), strict=True)), columns=list(COLUMNS))


def gap_times(frame: pd.DataFrame) -> list[np.ndarray]:
    """The chunk times of the successful requests in ``frame`` that have a gap between chunks, in its order."""
    return [t for t, ok in zip(frame["chunk_times"], frame["ok"], strict=True) if ok and len(t) > 1]


def chunk_gaps(frame: pd.DataFrame) -> np.ndarray:
    """All gaps between consecutive text chunks of the successful requests in ``frame``, pooled (seconds)."""
    times = gap_times(frame)
    gaps = np.empty(sum(len(t) - 1 for t in times))  # filled in place: no second copy of a long run's gaps
    at = 0
    for t in times:
        chunk_gaps_s(t, out=gaps[at:at + len(t) - 1])
        at += len(t) - 1
    return gaps


def pair_label(prompt_tokens: int, output_tokens: int) -> str:
    """``in1024-out128``: the name of a (prompt, output) pair in file names."""
    return f"in{int(prompt_tokens)}-out{int(output_tokens)}"
