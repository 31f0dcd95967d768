"""Per-request metrics from the raw records (cardgen's names; formulas in the card's Method section).

- ``ttft_s`` = first text chunk - send
- ``e2e_s`` = end of stream - send
- ``tpot_s`` = (e2e - ttft) / (output tokens - 1)
- ``decode_tok_s`` = (output tokens - 1) / (e2e - ttft) = 1 / tpot
- ``speed_from_start_tok_s`` = output tokens / e2e
- ``send_lag_s`` = send - scheduled send (open loop)
- per-chunk gaps (ITL): differences of consecutive text-chunk arrival times

Token counts are the server's (``usage``); chunks are never counted as tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from cardgen.schemas.records import RequestRecord

COLUMNS = (
    "scenario", "kind", "group", "endpoint", "parallel", "rate_rps", "wave", "repeat", "warmup", "attempt",
    "prompt_tokens_target", "output_tokens_target", "prompt_tokens", "output_tokens",
    "scheduled_at", "sent_at", "first_token_at", "end_at", "ok", "error_kind",
    "ttft_s", "e2e_s", "tpot_s", "decode_tok_s", "speed_from_start_tok_s", "send_lag_s", "n_chunks",
    "chunk_times", "item", "prefix", "phase", "conversation", "turn",
)

_NAN = float("nan")


def _num(value: float | int | None) -> float:
    return _NAN if value is None else float(value)


def request_row(rec: RequestRecord) -> dict[str, object]:
    """One record as a flat row with its derived metrics (NaN where an input is missing)."""
    sent = rec.sent_at
    first = _num(rec.first_token_at)
    end = _num(rec.end_at if rec.end_at is not None else (rec.chunk_times[-1] if rec.chunk_times else None))
    out = _num(rec.output_tokens)
    ttft = first - sent
    e2e = end - sent
    decode_time = e2e - ttft
    ok = rec.error is None
    if not ok:
        ttft = e2e = decode_time = _NAN
    tpot = decode_time / (out - 1) if out > 1 and decode_time > 0 else _NAN
    return {
        "scenario": rec.scenario, "kind": rec.kind, "group": rec.group, "endpoint": rec.endpoint,
        "parallel": _num(rec.parallel), "rate_rps": _num(rec.rate_rps), "wave": _num(rec.wave),
        "repeat": _num(rec.repeat), "warmup": bool(rec.warmup), "attempt": int(rec.attempt),
        "prompt_tokens_target": rec.prompt_tokens_target, "output_tokens_target": rec.output_tokens_target,
        "prompt_tokens": _num(rec.prompt_tokens), "output_tokens": out,
        "scheduled_at": _num(rec.scheduled_at), "sent_at": sent, "first_token_at": first, "end_at": end,
        "ok": ok, "error_kind": str(rec.error_kind) if rec.error_kind is not None else ("" if ok else "unknown"),
        "ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot,
        "decode_tok_s": 1.0 / tpot if tpot > 0 else _NAN,
        "speed_from_start_tok_s": out / e2e if ok and e2e > 0 and out >= 1 else _NAN,
        "send_lag_s": sent - rec.scheduled_at if rec.scheduled_at is not None else _NAN,
        "n_chunks": len(rec.chunk_times),
        "chunk_times": np.asarray(rec.chunk_times, dtype=float),
        "item": _num(rec.item), "prefix": _num(rec.prefix), "phase": rec.phase or "",
        "conversation": _num(rec.conversation), "turn": _num(rec.turn),
    }


def request_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Every record as a row of :data:`COLUMNS`, in send order (ties keep file order)."""
    rows = [request_row(r) for r in records]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if df.empty:
        return df.astype({"ok": bool, "warmup": bool, "attempt": int})
    return df.sort_values("sent_at", kind="stable").reset_index(drop=True)


def chunk_gaps(frame: pd.DataFrame) -> np.ndarray:
    """All gaps between consecutive text chunks of the successful requests in ``frame``, pooled (seconds)."""
    parts = [np.diff(t) for t, ok in zip(frame["chunk_times"], frame["ok"], strict=True) if ok and len(t) > 1]
    return np.concatenate(parts) if parts else np.empty(0)


def pair_label(prompt_tokens: int, output_tokens: int) -> str:
    """``in1024-out128``: the name of a (prompt, output) pair in file names."""
    return f"in{int(prompt_tokens)}-out{int(output_tokens)}"
