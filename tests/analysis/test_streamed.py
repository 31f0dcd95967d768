"""A run's records read as they are iterated (``load_run(stream_requests=True)``, what ``cardgen render`` reads):
read once, made rows as they come, kept only for the kinds that read them, and the same card as records held
whole; a garbled record is the same one-line error, a torn last line the same warning."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from simruns import simulate, synthetic_run

from cardgen.analysis import kindparts
from cardgen.analysis.analyse import analyse
from cardgen.analysis.outcomes import suite_points
from cardgen.analysis.rundata import StoredRecords, load_run
from cardgen.card.render import render_card
from cardgen.errors import RunFileError
from cardgen.rundir import REQUESTS_JSONL
from cardgen.schemas import RequestRecord
from cardgen.sim.config import SimConfig
from cardgen.suite import parse_suite

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "run_small"


class Once:
    """Records that can be iterated once only, as a file read as it goes is (a second pass would read it again)."""

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        self.records, self.passes = list(records), 0

    def __iter__(self) -> Iterator[RequestRecord]:
        self.passes += 1
        if self.passes > 1:
            raise AssertionError("the records were read twice")
        return iter(self.records)


def test_the_analysis_reads_the_records_once_and_gives_the_same_summary():
    data, _ = synthetic_run()
    whole = analyse(data).summary.model_dump()
    once = Once(data.requests)
    assert analyse(replace(data, requests=once)).summary.model_dump() == whole
    assert once.passes == 1


MIXED = """name: mixed
endpoint: chat
scenarios:
  - {kind: structured, schemas: [flat], prompt_tokens: 128, output_tokens: 32, parallel: [2], rounds: 2}
  - {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: [2], min_requests: 8, max_requests: 8}
"""


def test_only_the_kinds_that_read_records_are_given_theirs(tmp_path, monkeypatch):
    simulate(parse_suite(MIXED, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"), run_dir=tmp_path)
    held, streamed = load_run(tmp_path), load_run(tmp_path, stream_requests=True)
    points = suite_points(held.info)
    assert kindparts.record_readers(points) == {p.name for p in points.values() if p.kind == "structured"}
    given: dict[str, list[str]] = {}
    real = kindparts.KindRun

    def spy(**fields):
        given.setdefault(fields["kind"], []).extend(r.scenario for r in fields["records"])
        return real(**fields)

    monkeypatch.setattr(kindparts, "KindRun", spy)
    card = render_card(analyse(streamed), date="2026-12-07")
    structured = [r.scenario for r in held.requests if r.kind == "structured"]
    assert structured and given["structured"] == structured * 2  # its records, in file order (precision, result)
    assert given["closed"] == []  # a kind that reads rows only holds no record
    monkeypatch.setattr(kindparts, "KindRun", real)
    assert card == render_card(analyse(held), date="2026-12-07")


def test_a_streamed_run_renders_the_card_a_held_run_does():
    held = load_run(FIXTURE)
    streamed = load_run(FIXTURE, stream_requests=True)
    assert isinstance(streamed.requests, StoredRecords) and isinstance(held.requests, list)
    assert [r.model_dump() for r in streamed.requests] == [r.model_dump() for r in held.requests]
    date = "2026-12-07"
    assert render_card(analyse(streamed), date=date) == render_card(analyse(held), date=date)


def test_a_garbled_record_is_the_same_one_line_error_once_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    lines = (run / REQUESTS_JSONL).read_text("utf-8").splitlines()
    bad = json.loads(lines[1])
    bad["sent_at"] = "soon"
    (run / REQUESTS_JSONL).write_text("\n".join([lines[0], json.dumps(bad), *lines[2:]]) + "\n", "utf-8")
    with pytest.raises(RunFileError) as held:
        load_run(run)
    streamed = load_run(run, stream_requests=True)  # nothing read yet
    with pytest.raises(RunFileError) as read:
        list(streamed.requests)
    assert str(read.value) == str(held.value) and "does not fit the schema" in str(read.value)
    assert "\n" not in str(read.value)


def test_a_torn_last_line_is_counted_once_the_records_are_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    with (run / REQUESTS_JSONL).open("a", encoding="utf-8") as fh:
        fh.write('{"id": "cut-sho')
    streamed = load_run(run, stream_requests=True)
    assert streamed.torn == {}
    n = sum(1 for _ in streamed.requests)
    assert streamed.torn == {REQUESTS_JSONL: 15} == load_run(run).torn
    assert n == len(load_run(run).requests)
