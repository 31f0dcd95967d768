"""A modelled build on two cores (:mod:`cardgen.sim.beside`): the run computed in a forked process, its lines
written and made the card's rows in this one. The same files and card as in one process; what the run raises is
raised here; a run killed, a line that cannot be written and a Ctrl-C each keep every line handed over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cardgen.cli import model
from cardgen.cli.main import main
from cardgen.errors import RunError, UsageError
from cardgen.recorder import Recorder
from cardgen.rundir import REQUESTS_JSONL, SERVER_METRICS_JSONL, RunDir
from cardgen.schemas.records import MetricSample, RequestRecord
from cardgen.sim import beside, interrupts

TINY = """name: tiny
scenarios:
  - {kind: ingest, prompt_tokens: [16, 256, 1024]}
  - {kind: closed, prompt_tokens: [256], output_tokens: [32], parallel: [1, 4], min_requests: 8}
  - {kind: open, prompt_tokens: 128, output_tokens: 16, rates: [8], num_requests: 8}
  - {kind: slo, name: slo, load: rate, prompt_tokens: 256, output_tokens: 16, slo: {ttft_p99_s: 0.5},
     resolution: 0.25}
"""
LONG = """name: long
scenarios:
  - {kind: closed, name: long, prompt_tokens: 32, output_tokens: 16, parallel: [64], min_requests: 400000,
     max_requests: 400000}
"""


def rec(i: int) -> RequestRecord:
    return RequestRecord(scenario="p", kind="closed", prompt_tokens_target=8, output_tokens_target=4,
                         sent_at=float(i), end_at=i + 0.5, output_tokens=4, chunk_times=[i + 0.1, i + 0.2])


def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, two: bool, name: str) -> dict[str, bytes]:
    """``cardgen build`` of TINY, its start time fixed, in two processes or one: its files (run.json apart)."""
    monkeypatch.setattr(model.beside, "usable", lambda: two)
    monkeypatch.setattr(model.time, "time", lambda: 1_796_000_000.0)
    used = []
    real = beside.compute_beside
    monkeypatch.setattr(model.beside, "compute_beside", lambda *a, **k: used.append(1) or real(*a, **k))
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / name
    main(["build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "tiny.yaml"), "--out", str(out),
          "--quiet"])
    monkeypatch.undo()
    assert used == ([1] if two else [])
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "run.json"}


def test_a_build_on_two_cores_writes_what_one_process_writes(tmp_path, monkeypatch):
    one = build(tmp_path, monkeypatch, two=False, name="one")
    two = build(tmp_path, monkeypatch, two=True, name="two")
    assert {REQUESTS_JSONL, SERVER_METRICS_JSONL, "README.md", "summary.json"} <= set(two)
    assert any(name.startswith("figures/") for name in two)
    assert two.keys() == one.keys()
    assert [name for name in two if two[name] != one[name]] == []
    info = RunDir(tmp_path / "two").load_run_info()
    assert info.status == "complete" and info.requests_total == len(two[REQUESTS_JSONL].splitlines())


def test_the_lines_handed_over_are_written_in_order_and_what_the_run_returned_comes_back(tmp_path):
    told: list[RequestRecord] = []

    def compute(lines: beside.HandedLines) -> tuple[str, int]:
        recorder = Recorder(tmp_path, lines=lines)
        for i in range(3):
            recorder.record(rec(i))
        recorder.scrape(MetricSample(t=1.0, t_end=1.5, samples={"up": [{"labels": {}, "value": 1.0}]}))
        recorder.sync()  # every line so far written, here, before this returns
        written = len((tmp_path / REQUESTS_JSONL).read_text().splitlines())
        recorder.close()
        return "done", written

    result, held = beside.compute_beside(compute, tmp_path, on_record=told.append, hold_scrapes=True)
    assert result == ("done", 3)
    assert [r.sent_at for r in told] == [0.0, 1.0, 2.0] and told == [rec(i) for i in range(3)]
    assert [RequestRecord.model_validate_json(x) for x in (tmp_path / REQUESTS_JSONL).read_text().splitlines()] \
        == told
    assert held is not None and [(s.t, s.t_end, s.samples) for s in held] == [(1.0, 1.5, {"up": [{"labels": {},
                                                                                                  "value": 1.0}]})]
    assert (tmp_path / SERVER_METRICS_JSONL).read_text().count("\n") == 1


def test_what_the_run_raises_is_raised_here(tmp_path):
    def compute(lines: beside.HandedLines) -> None:
        Recorder(tmp_path, lines=lines).record(rec(0))
        raise UsageError("no point of suite 'x' fits the server's context")

    with pytest.raises(UsageError, match="no point of suite 'x'"):
        beside.compute_beside(compute, tmp_path)
    assert len((tmp_path / REQUESTS_JSONL).read_text().splitlines()) == 1  # what it handed over before


def test_a_run_killed_keeps_every_line_it_handed_over(tmp_path):
    """Every line handed over is written, in order: those before a sync (before run.json says a point ended)
    all; of those after it, the batches that went."""
    def compute(lines: beside.HandedLines) -> None:
        recorder = Recorder(tmp_path, lines=lines)
        for i in range(50):
            recorder.record(rec(i))
        recorder.sync()
        for i in range(50, 80):
            recorder.record(rec(i))
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(RunError, match="killed by signal 9 before it ended: every line it handed over is in"):
        beside.compute_beside(compute, tmp_path)
    lines = (tmp_path / REQUESTS_JSONL).read_text().splitlines()
    sent = [RequestRecord.model_validate_json(x).sent_at for x in lines]
    assert 50 <= len(sent) <= 80 and sent == [float(i) for i in range(len(sent))]


def test_a_line_that_cannot_be_written_ends_the_run_with_its_error(tmp_path, monkeypatch):
    def full(self: beside.Scribe) -> None:
        if any(self._pending.values()):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(beside.Scribe, "_write", full)  # in this process: the child only hands lines over

    def compute(lines: beside.HandedLines) -> None:
        recorder = Recorder(tmp_path, lines=lines)
        for i in range(1_000_000):  # ends at the first line after the scribe stopped (a full pipe at most)
            try:
                recorder.record(rec(i))
            except OSError as exc:
                (tmp_path / "told").write_text(f"{i} {exc}")
                raise

    with pytest.raises(OSError, match="No space left on device"):
        beside.compute_beside(compute, tmp_path)
    sent, told = (tmp_path / "told").read_text().split(" ", 1)
    # the run was told why, and ended there: not a million records later (a pipe holds a few hundred)
    assert int(sent) < 10_000 and "No space left on device" in told


def test_a_ctrl_c_while_a_line_is_on_its_way_leaves_every_message_whole(monkeypatch):
    """The run takes a Ctrl-C between two events of its clock (interrupts.at_safe_points): one that comes while a
    message is half written is noted, the message goes whole, and the next one too."""
    read_end, write_end = os.pipe()
    answers, _ = os.pipe()
    lines = beside.HandedLines(write_end, answers)
    real = os.write
    calls = []

    def slow(fd: int, data: memoryview) -> int:  # a few bytes a call, and a Ctrl-C during the first
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real(fd, bytes(data[:7]))

    monkeypatch.setattr(beside, "_BATCH", 0)  # every message written as it comes
    monkeypatch.setattr(beside.os, "write", slow)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's process has it
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.at_safe_points():
            lines.request('{"a": 1}\n')
            lines.request('{"a": 2}\n')
            assert interrupts.HEARD.noted
    finally:
        signal.signal(signal.SIGINT, before)
    got = os.read(read_end, 1 << 16)
    head = beside._HEAD.pack(beside.REQUEST, 9)
    assert got == head + b'{"a": 1}\n' + head + b'{"a": 2}\n' and len(calls) > 2
    for fd in (read_end, write_end, answers):
        os.close(fd)


def test_lines_go_over_in_batches_and_a_sync_sends_every_one_before_its_answer(monkeypatch):
    read_end, write_end = os.pipe()
    answers, said = os.pipe()
    lines = beside.HandedLines(write_end, answers)
    real, writes = os.write, []

    def counted(fd: int, data: memoryview) -> int:
        writes.append(len(data))
        return real(fd, data)

    monkeypatch.setattr(beside.os, "write", counted)
    for i in range(100):
        lines.request(f'{{"a": {i}}}\n')
    assert writes == []  # far from a batch: none written yet
    real(said, b"ok\n")  # the scribe's answer to the sync, ahead of it
    lines.sync()
    got = os.read(read_end, 1 << 16)
    head = beside._HEAD.size
    assert len(writes) == 1 and got.endswith(beside._HEAD.pack(beside.SYNC, 0))
    assert got.count(b'{"a": ') == 100 and len(got) == sum(head + len(f'{{"a": {i}}}\n') for i in range(100)) + head
    for fd in (read_end, write_end, answers, said):
        os.close(fd)


def _ctrl_c_heard() -> None:
    """A terminal's process hears Ctrl-C; one started in the background of a shell (make test's untimed tests)
    inherits SIGINT ignored, and so would the build."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_of_a_build_on_two_cores_keeps_every_request_it_computed(tmp_path):
    """The terminal's Ctrl-C reaches both processes: the run ends as an interrupted run ends (run.json
    "interrupted", resumable) and every request it counts is a whole line of requests.jsonl."""
    (tmp_path / "long.yaml").write_text(LONG)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "cardgen", "build", "CodeLlama-7b", "--gpu", "A100-80GB",
                             "--suite", str(tmp_path / "long.yaml"), "--out", str(out), "--quiet", "--no-card"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_ctrl_c_heard)
    requests = out / REQUESTS_JSONL
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if requests.exists() and requests.stat().st_size > 2_000_000:  # well into the run
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "cardgen: interrupted" in err and "Traceback" not in err, err
    info = json.loads((out / "run.json").read_text())
    lines = requests.read_bytes().split(b"\n")
    assert lines[-1] == b""  # no torn line
    records = [RequestRecord.model_validate_json(x) for x in lines[:-1]]
    assert info["status"] == "interrupted" and info["requests_total"] == len(records) > 1000
    assert len({r.response_id for r in records}) == len(records)  # each once
