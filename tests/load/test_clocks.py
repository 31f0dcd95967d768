"""The NTP-style estimate of a worker's clock (cardgen.load.clocks), on exchanges with known legs."""

from __future__ import annotations

import pytest

from cardgen.load.clocks import ClockOffset, Exchange, estimate, shift_record, to_master
from cardgen.schemas.records import RequestRecord


def exchange(t0: float, *, offset: float, up: float, down: float, hold: float = 1e-5) -> Exchange:
    """A ping leaving the master at ``t0``, ``up`` seconds on the way, held ``hold`` by the worker, ``down`` back,
    with the worker's clock ``offset`` ahead."""
    t1 = t0 + up + offset
    return Exchange(t0=t0, t1=t1, t2=t1 + hold, t3=t0 + up + hold + down)


def test_symmetric_legs_give_the_offset_exactly():
    e = estimate([exchange(100.0 + i, offset=0.25, up=0.001, down=0.001) for i in range(8)])
    assert e is not None
    assert e.offset_s == pytest.approx(0.25, abs=1e-9) and e.uncertainty_s == pytest.approx(0.001, abs=1e-9)
    assert e.round_trip_s == pytest.approx(0.002) and e.exchanges == 8 and e.applied_s == e.offset_s


def test_the_shortest_round_trips_are_kept_and_the_truth_stays_within_the_bound():
    # a busy loop on the way up delays some pings by tens of ms: taken alone their estimate is off by half that
    slow = [exchange(200.0 + i, offset=-0.03, up=0.040, down=0.0005) for i in range(10)]
    fast = [exchange(300.0 + i, offset=-0.03, up=0.0005 + i * 1e-5, down=0.0004) for i in range(4)]
    e = estimate(slow + fast)
    assert e is not None and abs(e.offset_s - -0.03) <= e.uncertainty_s <= 0.0006
    assert abs(estimate(slow).offset_s - -0.03) > 0.019  # type: ignore[union-attr]


def test_an_offset_within_its_uncertainty_is_not_applied():
    e = ClockOffset(offset_s=2e-5, uncertainty_s=1e-4, round_trip_s=2e-4, exchanges=16)
    assert e.applied_s == 0.0 and "not corrected" in e.words()
    assert estimate([]) is None


def test_a_record_goes_to_the_masters_clock_every_stamp_of_it():
    rec = RequestRecord(scenario="p", kind="closed", prompt_tokens_target=1, output_tokens_target=2, sent_at=10.0,
                        scheduled_at=9.9, headers_at=10.1, first_token_at=10.2, first_answer_at=10.2,
                        chunk_times=[10.2, 10.3], end_at=10.4, prompt_tokens=1)
    moved = to_master(rec, ClockOffset(offset_s=0.25, uncertainty_s=1e-4, round_trip_s=2e-4, exchanges=16))
    assert moved.sent_at == pytest.approx(9.75) and moved.scheduled_at == pytest.approx(9.65)
    assert moved.chunk_times == pytest.approx([9.95, 10.05]) and moved.end_at == pytest.approx(10.15)
    assert moved.headers_at == pytest.approx(9.85) and moved.first_token_at == pytest.approx(9.95)
    back = shift_record(moved, 0.25)
    assert moved.prompt_tokens == 1 and back.chunk_times == pytest.approx(rec.chunk_times)
    assert back.model_dump(exclude={"chunk_times"}) == pytest.approx(rec.model_dump(exclude={"chunk_times"}))
    assert to_master(rec, None) is rec
