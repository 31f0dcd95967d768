from __future__ import annotations

import math

import numpy as np
import pytest

from cardgen.analysis.requests import chunk_gaps, request_frame
from cardgen.schemas.records import ErrorKind, RequestRecord


def rec(**kw) -> RequestRecord:
    base = dict(scenario="closed-in8-out5-p1", kind="closed", parallel=1, prompt_tokens_target=8,
                output_tokens_target=5, sent_at=100.0, first_token_at=100.5, chunk_times=[100.5, 100.6, 100.8, 101.0],
                end_at=101.5, prompt_tokens=8, output_tokens=5)
    base.update(kw)
    return RequestRecord(**base)


def test_per_request_formulas():
    row = request_frame([rec()]).iloc[0]
    assert row["ttft_s"] == pytest.approx(0.5)
    assert row["e2e_s"] == pytest.approx(1.5)
    assert row["tpot_s"] == pytest.approx((1.5 - 0.5) / 4)
    assert row["decode_tok_s"] == pytest.approx(4 / 1.0)
    assert row["speed_from_start_tok_s"] == pytest.approx(5 / 1.5)
    assert math.isnan(row["send_lag_s"])
    assert row["n_chunks"] == 4


def test_send_lag_and_single_token():
    row = request_frame([rec(kind="open", scheduled_at=99.9, output_tokens=1, chunk_times=[100.5])]).iloc[0]
    assert row["send_lag_s"] == pytest.approx(0.1)
    assert math.isnan(row["tpot_s"]) and math.isnan(row["decode_tok_s"])
    assert row["speed_from_start_tok_s"] == pytest.approx(1 / 1.5)


def test_failed_request_has_no_latency():
    row = request_frame([rec(error="HTTP 500", error_kind=ErrorKind.HTTP_STATUS, first_token_at=None,
                             chunk_times=[], output_tokens=None)]).iloc[0]
    assert not row["ok"] and row["error_kind"] == "http_status"
    assert math.isnan(row["ttft_s"]) and math.isnan(row["e2e_s"]) and math.isnan(row["speed_from_start_tok_s"])


def test_frame_sorted_by_send_time_and_gaps_pooled():
    frame = request_frame([rec(sent_at=100.2), rec(sent_at=99.0, first_token_at=99.5)])
    assert list(frame["sent_at"]) == [99.0, 100.2]
    gaps = chunk_gaps(frame)
    assert np.allclose(sorted(gaps), sorted([0.1, 0.2, 0.2] * 2))


def test_empty_frame_has_columns():
    frame = request_frame([])
    assert frame.empty and "ttft_s" in frame.columns


def test_a_frame_made_in_pieces_is_the_frame_made_at_once(monkeypatch):
    import cardgen.analysis.requests as requests_module

    records = [rec(sent_at=100.0 + (i * 7) % 11, scheduled_at=99.0 + i if i % 2 else None, repeat=i % 3 or None,
                   phase="warm" if i % 4 else None, extra={"i": i} if i % 5 == 0 else None)
               for i in range(11)]
    records += [rec(sent_at=104.0, error="HTTP 500", error_kind=ErrorKind.HTTP_STATUS, first_token_at=None,
                    chunk_times=[], output_tokens=None)]
    whole = request_frame(records)
    monkeypatch.setattr(requests_module, "FRAME_PIECE", 5)  # three pieces: 5, 5 and 2 records
    pieces = request_frame(records)
    assert list(pieces.dtypes) == list(whole.dtypes)
    assert pieces.drop(columns=["chunk_times"]).equals(whole.drop(columns=["chunk_times"]))
    assert all(np.array_equal(a, b) for a, b in zip(pieces["chunk_times"], whole["chunk_times"], strict=True))
    assert list(pieces["sent_at"]) == sorted(r.sent_at for r in records)
