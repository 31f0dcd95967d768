"""The run writer: one point's entry whatever happens to it, a resumed run's tallies that are the whole run's,
a torn tail set aside before anything is appended after it, and a run computed whole written as given. The
writer's callers (both clocks, a calibrated run) are tested end to end in tests/load, tests/sim and
tests/scenarios."""

from __future__ import annotations

import json

from cardgen.points import expand
from cardgen.runinfo import begin_run_info
from cardgen.runwriter import RunWriter
from cardgen.scenarios.resume import resume_plan
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import PointOutcome, ServerInfo
from cardgen.suite import parse_suite

SUITE = parse_suite("""name: tiny
scenarios:
- {kind: closed, name: pair, prompt_tokens: 8, output_tokens: 4, parallel: [1, 2], min_requests: 2}
""", source="test")
POINTS = expand(SUITE)
T0 = 1_800_000_000.0


def info(points=()):
    return begin_run_info(argv=["cardgen"], model="m", suite=SUITE, server=ServerInfo(url="http://x"),
                          started_unix=T0, clock="virtual", modelled=True, points=points)


def rec(scenario: str, *, attempt: int = 0) -> RequestRecord:
    return RequestRecord(scenario=scenario, kind="closed", prompt_tokens_target=8, output_tokens_target=4,
                         sent_at=T0, end_at=T0 + 1, output_tokens=4, attempt=attempt)


def on_disk(writer: RunWriter) -> dict:
    return json.loads(writer.files.run_json.read_text())


def test_a_points_entry_is_replaced_not_repeated(tmp_path):
    writer = RunWriter.begin(tmp_path / "run", info([PointOutcome(name="a", kind="closed")]))
    assert on_disk(writer)["status"] == "running" and on_disk(writer)["pid"] is not None
    writer.put_points(PointOutcome(name="a", kind="closed", started_unix=T0))
    writer.put_points(PointOutcome(name="b", kind="closed"), save=False)  # the heartbeat saves it soon
    assert [p["name"] for p in on_disk(writer)["points"]] == ["a"]
    writer.put_points(PointOutcome(name="a", kind="closed", started_unix=T0, ended_unix=T0 + 1))
    assert [(p["name"], p["ended_unix"]) for p in on_disk(writer)["points"]] == [("a", T0 + 1), ("b", None)]


def test_a_resumed_run_counts_the_whole_run_and_sets_a_torn_tail_aside(tmp_path):
    a, b = POINTS
    first = RunWriter.begin(tmp_path, info([PointOutcome(name=p.name, kind="closed") for p in POINTS]))
    first.open({})
    first.append(records=[rec(a.name), rec(b.name)])
    first.put_points(PointOutcome(name=a.name, kind="closed", started_unix=T0, ended_unix=T0 + 1),
                     PointOutcome(name=b.name, kind="closed", started_unix=T0 + 1))  # b is cut off
    first.end("interrupted", ended_unix=T0 + 2)
    with first.files.requests_jsonl.open("a") as fh:
        fh.write('{"scenario": "b", "ki')  # a kill mid-write

    plan = resume_plan(first.info, POINTS)
    again = RunWriter.resume(tmp_path, first.info, plan, when=T0 + 3600)
    assert on_disk(again)["status"] == "running" and [o.attempt for o in again.info.points] == [0, 1]
    warnings = " | ".join(again.info.warnings)
    assert "requests.jsonl ended in a line cut short (21 bytes" in warnings and "resumed with cardgen resume" in warnings
    assert (tmp_path / "requests.jsonl.torn").read_text() == '{"scenario": "b", "ki\n'
    recorder = again.open(plan.attempts)
    assert (recorder.total, recorder.superseded) == (1, 1)  # b's first attempt: kept, never counted
    again.append(records=[rec(b.name, attempt=1)])
    ended = again.end("complete", ended_unix=T0 + 3700)
    assert (ended.requests_total, on_disk(again)["requests_total"], on_disk(again)["status"]) == (2, 2, "complete")
    assert len(again.files.requests_jsonl.read_text().splitlines()) == 3


def test_a_run_computed_whole_is_written_as_given(tmp_path):
    given = info([PointOutcome(name="a", kind="closed", started_unix=T0, ended_unix=T0 + 1)])
    given.status, given.requests_total = "complete", 41  # the caller's tallies, never recounted
    path = RunWriter.write_whole(tmp_path / "whole", given, [rec("a"), rec("a")])
    written = json.loads((path / "run.json").read_text())
    assert (written["status"], written["requests_total"], written["pid"]) == ("complete", 41, None)
    assert len((path / "requests.jsonl").read_text().splitlines()) == 2 and not (path / "server_metrics.jsonl").exists()
