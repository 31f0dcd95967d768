"""``cardgen resume`` of a run measured over HTTP: a load process killed with ``kill -9`` mid-suite continues where
it stopped, with nothing that was on disk lost or rewritten; a server that dies mid-run cuts the run off, and
resume continues it against a new one. Runs that must not be resumed (complete, still running, written before
runs recorded their points) are refused in one line. These tests need real processes (a kill, a dead server),
so they run the virtual server over HTTP (``--real-time``) and wait on what is on disk, never on a fixed sleep;
the rules of resuming are tested in virtual time in tests/scenarios/test_resume_rules.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cardgen.errors import RunFileError
from cardgen.rundir import RunDir

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

DATA = Path(__file__).resolve().parents[1] / "data" / "run_small"
# points of about a second each on the virtual server (CodeLlama-7b on an A100-80GB, in real time)
SUITE = """name: resumable
scenarios:
- {kind: closed, name: pair, prompt_tokens: 64, output_tokens: 64, parallel: [1, 2, 4], min_requests: 8}
- {kind: open, name: poisson, prompt_tokens: 64, output_tokens: 32, rates: [8], num_requests: 8}
"""


def cardgen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cardgen", *args], capture_output=True, text=True, timeout=timeout)


def start_build(suite: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cardgen", "build", "CodeLlama-7b", "--gpu", "A100-80GB",
                             "--suite", str(suite), "--out", str(out), "--no-card", "--quiet", "--real-time", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def whole_lines(path: Path) -> bytes:
    """The file up to its last newline: what a reader counts (a torn last line is not a record)."""
    data = path.read_bytes() if path.exists() else b""
    return data[: data.rfind(b"\n") + 1]


def wait_for(predicate, *, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the build ended before the test could kill it: {proc.stderr.read()}")
        try:
            if predicate():
                return
        except (OSError, ValueError, RunFileError):
            pass  # not written yet
        time.sleep(0.1)
    pytest.fail("timed out waiting for the build")


@pytest.mark.wire
def test_kill_9_mid_suite_then_resume_completes_with_nothing_lost_and_nothing_repeated(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    files = RunDir(out)
    proc = start_build(suite, out)
    try:
        def cut_mid_point() -> bool:  # a point has finished, and the next one has records on disk
            ended = [p.name for p in files.load_run_info().points if p.ended_unix is not None]
            if not ended:
                return False
            later = {r["scenario"] for r in records(files.requests_jsonl)} - set(ended)
            return bool(later)

        wait_for(cut_mid_point, timeout_s=120, proc=proc)
        proc.kill()  # SIGKILL: no chance to write an end
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert files.load_run_info().status == "died"
    again = cardgen("build", "CodeLlama-7b", "--suite", str(suite), "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"holds a run that died: continue it with 'cardgen resume {out}'" in again.stderr
    before = {name: whole_lines(out / name) for name in ("requests.jsonl", "loadgen.jsonl", "server_metrics.jsonl")}
    info_before = files.load_run_info()
    finished = {p.name for p in info_before.points if p.ended_unix is not None}
    old = records(files.requests_jsonl)
    old_by_point = {name: sorted((r["worker"], r["index"], r["sent_at"]) for r in old if r["scenario"] == name)
                    for name in {r["scenario"] for r in old}}
    cut = {r["scenario"] for r in old} - finished
    assert finished and len(cut) == 1, (finished, cut)
    (cut_name,) = cut
    assert {r["attempt"] for r in old} == {0}

    t0 = time.monotonic()
    proc2 = cardgen("resume", str(out), "--quiet")
    resume_s = time.monotonic() - t0
    assert proc2.returncode == 0, proc2.stderr
    assert proc2.stdout.strip().splitlines()[-1] == str(out)
    assert "Traceback" not in proc2.stderr

    info = files.load_run_info()
    assert info.status == "complete"
    # every byte that was on disk is still there, at the same place
    for name, data in before.items():
        assert (out / name).read_bytes()[: len(data)] == data, name
    new = records(files.requests_jsonl)
    added = new[len(old):]
    assert new[: len(old)] == old
    # no finished point was sent again
    assert not [r for r in added if r["scenario"] in finished]
    for name in finished:
        now = sorted((r["worker"], r["index"], r["sent_at"]) for r in new if r["scenario"] == name)
        assert now == old_by_point[name]
    # the cut-off point ran again as attempt 1; its cut-off records stay as attempt 0 (superseded)
    outcomes = {p.name: p for p in info.points}
    assert outcomes[cut_name].attempt == 1 and outcomes[cut_name].ended_unix is not None
    assert {r["attempt"] for r in old if r["scenario"] == cut_name} == {0}
    assert {r["attempt"] for r in added if r["scenario"] == cut_name} == {1}
    superseded = sum(1 for r in old if r["scenario"] == cut_name)
    # every point of the suite ended, and the tallies are the whole run's, superseded records left out
    assert all(p.ended_unix is not None for p in info.points) and len(info.points) == 4
    assert info.requests_total == len(new) - superseded
    assert any("resumed with cardgen resume" in w for w in info.warnings)
    # the card renders, as after an uninterrupted run
    assert files.card_md.is_file() and files.summary_json.is_file()
    print(f"resume: {resume_s:.1f} s; records {len(old)} before (of which {superseded} cut off), {len(new)} after")

    # resuming a complete run is refused, in one line, and changes nothing
    again = cardgen("resume", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "is complete" in again.stderr
    assert records(files.requests_jsonl) == new


@pytest.mark.wire
def test_a_run_whose_process_is_alive_is_not_resumed(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: long\nscenarios:\n- {kind: closed, prompt_tokens: 16, output_tokens: 32, parallel: 2, "
                     "min_requests: 2000}\n")
    out = tmp_path / "run"
    proc = start_build(suite, out)
    try:
        wait_for(lambda: records(RunDir(out).requests_jsonl), timeout_s=120, proc=proc)
        lines = len(records(RunDir(out).requests_jsonl))
        refused = cardgen("resume", str(out))
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and f"pid {proc.pid}" in refused.stderr and "still running" in refused.stderr
    assert len(records(RunDir(out).requests_jsonl)) >= lines  # the resume sent nothing: only the build wrote


def test_a_run_without_point_outcomes_is_refused(tmp_path):
    run = tmp_path / "old"
    shutil.copytree(DATA, run)
    data = json.loads((run / "run.json").read_text())
    data.update(status="interrupted", points=[])
    (run / "run.json").write_text(json.dumps(data))
    refused = cardgen("resume", str(run))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "did not record which points finished" in refused.stderr


def test_a_died_run_is_marked_died_before_anything_else(tmp_path):
    """The refusal of a run that cannot be resumed still leaves run.json saying what happened to it."""
    run = tmp_path / "dead"
    shutil.copytree(DATA, run)
    data = json.loads((run / "run.json").read_text())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    data.update(status="running", points=[], pid=dead.pid, hostname=socket.gethostname(),
                heartbeat_unix=time.time() - 5)
    (run / "run.json").write_text(json.dumps(data))
    refused = cardgen("resume", str(run))
    assert refused.returncode == 2 and "did not record which points finished" in refused.stderr
    assert json.loads((run / "run.json").read_text())["status"] == "died"


def test_a_torn_last_line_is_set_aside_not_buried(tmp_path):
    from cardgen.recorder import set_torn_tail_aside

    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    assert set_torn_tail_aside(path) == len(b'{"c": ')
    assert path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert (tmp_path / "requests.jsonl.torn").read_bytes() == b'{"c": \n'
    assert set_torn_tail_aside(path) == 0 and set_torn_tail_aside(tmp_path / "absent.jsonl") == 0


@pytest.mark.wire
def test_a_server_that_dies_mid_run_cuts_the_run_off_and_resume_continues_it(tmp_path):
    import os
    import signal

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loadkit import sim_server

    suite = tmp_path / "suite.yaml"
    suite.write_text("name: dies\nscenarios:\n"
                     "- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: [1], min_requests: 4}\n"
                     "- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: [2], min_requests: 4,"
                     " min_duration_s: 12}\n")
    out = tmp_path / "run"
    with sim_server(tmp_path) as (sim, _):
        proc = subprocess.Popen([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url, "--suite",
                                 str(suite), "--out", str(out), "--no-card", "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        second = "closed-in64-out16-p2"
        wait_for(lambda: any(r["scenario"] == second for r in records(RunDir(out).requests_jsonl)), timeout_s=120,
                 proc=proc)  # the second point is under way
        os.kill(sim.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0
    assert "the server stopped answering" in err and "cardgen resume" in err, err
    info = RunDir(out).load_run_info()
    assert info.status in ("failed", "interrupted")
    first, cut = info.points
    assert first.stop == "minimum reached" and cut.stop == "interrupted"
    refusals = [r for r in records(RunDir(out).requests_jsonl) if r["error_kind"] == "connect"]
    # it stopped once the server had refused every request for 5 s, not at the end of the point's 12 s
    assert refusals and refusals[-1]["end_at"] - cut.started_unix < 10
    again = tmp_path / "again"
    again.mkdir()
    with sim_server(again) as (sim2, _):
        done = cardgen("resume", str(out), "--url", sim2.url, "--no-card", "--quiet", timeout=180)
    assert done.returncode == 0, done.stderr
    info = RunDir(out).load_run_info()
    assert info.status == "complete"
    assert info.points[1].attempt == 1 and info.points[1].ended_unix is not None
