"""The typed messages between load processes: each survives Locust's wire, and a bad one is reported, not lost."""

from __future__ import annotations

import math
from types import SimpleNamespace

import msgpack
import pytest
from pydantic import ValidationError

from cardgen.kinds import KINDS
from cardgen.kinds.openloop.schema import OpenParams
from cardgen.load import messages
from cardgen.load.messages import Assignment, Done, Fatal, LoadgenTick, Ready, Record, Setup, StopPoint
from cardgen.points import Point, expand
from cardgen.schemas.records import ErrorKind, LoadgenSample, RequestRecord
from cardgen.suite import parse_suite

RECORD = RequestRecord(scenario="open-in8-out4-rinf", kind="open", rate_rps=math.inf, prompt_tokens_target=8,
                       output_tokens_target=4, sent_at=1.5, scheduled_at=1.0, chunk_times=[1.6, 1.7],
                       error="HTTP 500", error_kind=ErrorKind.HTTP_STATUS)
ALL = [
    Setup(model="m", engine="vllm", headers={"Authorization": "Bearer k"}, templates={"chat": {16: "x y"}},
          nonce=7, index=1, parts=2, name="worker-1"),
    Assignment(point=Point(name="p", group="g", endpoint="completions", timeout_s=30.0, rate_rps=math.inf,
                           params=OpenParams(num_requests=3)), index=0, parts=2, attempt=1),
    StopPoint(point="closed-in64-out16-p4"),
    Ready(worker="w"),
    Record(record=RECORD),
    LoadgenTick(sample=LoadgenSample(t=1.0, worker="w", loop_lag_s=0.002, cpu_percent=12.5, in_flight=3)),
    Done(point="p", worker="w", sent=3, started_unix=1.0, ended_unix=2.0, stop="saturated",
         detail="between waves of 16 and 17"),
    Fatal(worker="w", error="record 5: OSError: disk full", delivered=4),
]


class FakeRunner:
    """What ``send``/``listen`` use of a Locust runner, with Locust's own wire encoding in between."""

    def __init__(self) -> None:
        self.handlers: dict = {}
        self.wire: list[bytes] = []

    def send_message(self, topic, data, client_id=None):
        self.wire.append(msgpack.dumps((topic, data, "node-1")))

    def register_message(self, topic, listener):
        self.handlers[topic] = listener

    def deliver(self) -> None:
        for raw in self.wire:
            topic, data, node = msgpack.loads(raw, raw=False, strict_map_key=False)
            self.handlers[topic](environment=None, msg=SimpleNamespace(data=data, node_id=node))


@pytest.mark.parametrize("message", ALL, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_wire(message):
    runner, got, errors = FakeRunner(), [], []
    messages.listen(runner, type(message), lambda m, node: got.append((m, node)), on_error=errors.append)
    messages.send(runner, message)
    runner.deliver()
    assert errors == [] and got == [(message, "node-1")]


def test_an_infinite_rate_stays_infinite():
    point = ALL[1].point
    runner, got = FakeRunner(), []
    messages.listen(runner, Assignment, lambda m, node: got.append(m), on_error=pytest.fail)
    messages.send(runner, Assignment(point=point, index=0, parts=1))
    runner.deliver()
    assert math.isinf(got[0].point.rate_rps) and got[0].point == point


EVERY_KIND = """name: k
scenarios:
  - {kind: closed, prompt_tokens: [8], output_tokens: [4], parallel: [2], target_ci: 0.05}
  - {kind: open, prompt_tokens: 8, output_tokens: 4, rates: [inf], num_requests: 3}
  - {kind: waves, prompt_tokens: 8, output_tokens: 4, max_wave: 4}
  - {kind: ingest, prompt_tokens: [16, 32]}
  - {kind: batch, prompt_tokens: 8, output_tokens: 4, batch_sizes: [2]}
  - {kind: prefix, prefixes: 2}
  - {kind: chat, users: 2}
  - {kind: slo, load: rate, slo: {ttft_p90_s: 0.5}, prompt_tokens: 8, output_tokens: 4}
  - {kind: depth, depths: [0, 64], prompt_tokens: 8, output_tokens: 4}
  - {kind: images, images: [1], sides: [32], prompt_tokens: 8, output_tokens: 4, endpoint: chat}
  - {kind: structured, schemas: [flat], parallel: [1], rounds: 1}
"""


def test_every_kinds_point_comes_back_with_its_own_params():
    points = expand(parse_suite(EVERY_KIND))
    assert {p.kind for p in points} == set(KINDS)
    runner, got = FakeRunner(), []
    messages.listen(runner, Assignment, lambda m, node: got.append(m.point), on_error=pytest.fail)
    for point in points:
        messages.send(runner, Assignment(point=point, index=0, parts=1))
    runner.deliver()
    assert got == points and [type(p.params) for p in got] == [type(p.params) for p in points]


def test_a_malformed_message_or_a_failing_handler_is_reported_in_one_line():
    runner, errors = FakeRunner(), []

    def broken(message, node):
        raise OSError("disk\nfull")

    messages.listen(runner, Done, lambda m, node: None, on_error=errors.append)
    messages.listen(runner, Ready, broken, on_error=errors.append)
    runner.send_message(Done.topic, {"point": "p"})  # fields missing
    messages.send(runner, Ready(worker="w"))
    runner.deliver()
    assert len(errors) == 2 and all("\n" not in e for e in errors)
    assert errors[0].startswith("Done message from node-1: ValidationError")
    assert errors[1] == "Ready message from node-1: OSError: disk full"


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError):
        Setup(model="m", templates={}, nonce=1, speed=3)
