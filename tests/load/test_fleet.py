"""The master's account of its workers (cardgen.load.fleet): counts, clocks, a lost worker's in-flight requests."""

from __future__ import annotations

from cardgen.kinds.closed.schema import ClosedParams
from cardgen.load.clocks import ClockOffset
from cardgen.load.fleet import Fleet
from cardgen.load.messages import Listening
from cardgen.points import Point
from cardgen.schemas.records import ErrorKind, LoadgenSample, RequestRecord
from cardgen.schemas.run import PointOutcome


def rec(worker: str, t: float, **kw: object) -> RequestRecord:
    return RequestRecord(scenario="p", kind="closed", prompt_tokens_target=8, output_tokens_target=4, worker=worker,
                         sent_at=t, end_at=t + 1, **kw)


def test_each_worker_is_counted_put_on_the_masters_clock_and_judged_on_its_own_samples():
    fleet = Fleet()
    fleet.joined("a1", Listening(worker="w1", host="h1", address="10.0.0.4"))
    fleet.joined("a2", Listening(worker="w2", host="h2", address="10.0.0.5"))
    fleet.set_clock("a2", ClockOffset(offset_s=0.25, uncertainty_s=1e-4, round_trip_s=2e-4, exchanges=16))
    assert fleet.record("a2", rec("w2", 100.25)).sent_at == 100.0
    assert fleet.record("a1", rec("w1", 100.0)).sent_at == 100.0
    fleet.record("a1", rec("w1", 101.0))
    for t in range(100, 110):
        fleet.sample("a1", LoadgenSample(t=t, worker="w1", loop_lag_s=0.001, cpu_percent=10))
        fleet.sample("a2", LoadgenSample(t=t + 0.25, worker="w2", loop_lag_s=0.001 if t < 108 else 0.5))
    facts = {w.name: w for w in fleet.facts([PointOutcome(name="p", kind="closed", started_unix=100,
                                                          ended_unix=107.5)])}
    assert facts["w1"].requests == 2 and facts["w2"].requests == 1 and facts["w2"].address == "10.0.0.5"
    assert facts["w2"].clock_applied_s == 0.25 and facts["w1"].clock_offset_s is None
    assert facts["w1"].kept_up is True and facts["w2"].kept_up is True  # w2's stall came after the point
    assert all(w.lost is None for w in facts.values())


def test_a_lost_workers_requests_in_flight_are_recorded_as_lost_in_the_points_attempt():
    fleet = Fleet()
    fleet.joined("a3", Listening(worker="w3", address="10.0.0.6"))
    fleet.point = Point(name="p", group="g", endpoint="completions", timeout_s=60.0, prompt_tokens=8,
                        output_tokens=4, parallel=6, params=ClosedParams())
    fleet.attempt = 2
    fleet.sample("a3", LoadgenSample(t=50.0, worker="w3", loop_lag_s=0.0, in_flight=2))
    lost = fleet.lose("a3", why="it stopped answering the master's heartbeats", at=53.0)
    assert len(lost) == 2 and fleet.lose("a3", why="again", at=54.0) == []
    assert {r.error_kind for r in lost} == {ErrorKind.LOST} and {r.attempt for r in lost} == {2}
    assert all(r.worker == "w3" and "w3 (10.0.0.6)" in (r.error or "") and r.sent_at == 50.0 for r in lost)
    w3 = fleet.facts()[0]
    assert w3.lost_requests == w3.requests == 2 and w3.lost is not None and "point p (attempt 2)" in w3.lost
