"""The kinds' programs side by side, driven directly: the orders and rounds of the one-process kinds, which
processes each kind runs on, and a program and a judge for every kind. No clock, no socket, no server (each
kind's own program tests: tests/kinds/<kind>/test_<kind>_program.py)."""

from __future__ import annotations

from programkit import point_of

from cardgen.kinds import judge_for, program_for, runs_on
from cardgen.kinds.batch.program import BatchProgram
from cardgen.kinds.ingest.program import IngestProgram
from cardgen.kinds.prefix.program import PHASE_PAUSE_S, PrefixProgram


def test_ingestion_batch_and_prefix_orders():
    assert IngestProgram(point_of(kind="ingest", lengths=[16, 32], repeats=2)).ingest_order() == [
        (16, 0), (32, 0), (16, 1), (32, 1)]
    assert BatchProgram(point_of(kind="batch", warmups=1, runs=2)).batch_rounds() == [(0, True), (0, False), (1, False)]
    prefix = PrefixProgram(point_of(kind="prefix", prefixes=2, warm_rounds=2))
    assert prefix.prefix_order() == [(0, "cold"), (1, "cold"), (0, "warm"), (1, "warm"), (0, "warm"), (1, "warm")]
    assert [prefix.pause_before(n) for n in range(4)] == [PHASE_PAUSE_S, 0.0, PHASE_PAUSE_S, 0.0]
    for kind in ("batch", "ingest", "waves", "prefix", "chat"):
        assert runs_on(point_of(kind=kind), 0) and not runs_on(point_of(kind=kind), 1)
    assert runs_on(point_of(kind="closed"), 1) and runs_on(point_of(kind="open"), 3)


def test_sweeps_and_batch_rounds_with_and_without_a_target():
    plain = IngestProgram(point_of(kind="ingest", lengths=[16, 32], repeats=3))
    assert [plain.more_sweeps(n, precise=True) for n in range(4)] == [True, True, True, False]
    aimed = IngestProgram(point_of(kind="ingest", lengths=[16, 32], repeats=3, target_ci=0.03))
    assert aimed.more_sweeps(0, precise=True) and not aimed.more_sweeps(1, precise=True)
    assert aimed.more_sweeps(1, precise=False) and not aimed.more_sweeps(3, precise=False)
    batch = BatchProgram(point_of(kind="batch", runs=3, target_ci=0.03, max_runs=5))
    assert batch.more_rounds(2, precise=True) and not batch.more_rounds(3, precise=True)
    assert batch.more_rounds(4, precise=False) and not batch.more_rounds(5, precise=False)
    assert not BatchProgram(point_of(kind="batch", runs=3)).more_rounds(3, precise=False)


def test_every_kind_has_a_program_and_a_judge():
    own = {"ingest": {"lengths": [16, 32]}, "prefix": {"prefixes": 1}, "chat": {"conversations": 1, "turns": 1}}
    for kind in ("closed", "open", "waves", "ingest", "batch", "prefix", "chat"):
        point = point_of(kind=kind, parallel=1, **own.get(kind, {}))
        assert program_for(point).kind == kind and judge_for(point).point is point
