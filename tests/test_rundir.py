"""RunDir: atomic writes, loading with schema-version checks, one-line errors naming the file, the
effective status of a run whose writer was killed, and a model's name as a safe folder name."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cardgen.errors import NewerSchemaError, RenderError, RunFileError
from cardgen.rundir import (
    RUN_JSON,
    STALE_AFTER_S,
    SUMMARY_JSON,
    RunDir,
    effective_status,
    slugify,
)
from cardgen.runwriter import mark_died
from cardgen.schemas import RUN_SCHEMA_VERSION, SUMMARY_SCHEMA_VERSION, RunInfo, ServerInfo, Summary

# A process that starts a run (status "running"), says so, and waits to be killed.
WRITER = """
import sys, time
from cardgen.rundir import RunDir
from cardgen.schemas.run import RunInfo, ServerInfo
info = RunInfo(cardgen_version="test", command=["cardgen", "build", "m"], model="m", suite="quick",
               started_at="2026-01-01T00:00:00+00:00", started_unix=time.time(), server=ServerInfo(url="http://x"))
RunDir(sys.argv[1]).save_run_info(info)
print("running", flush=True)
time.sleep(300)
"""


def run_info(**fields) -> RunInfo:
    base = dict(cardgen_version="test", command=["cardgen"], model="m", suite="quick",
                started_at="2026-01-01T00:00:00+00:00", started_unix=time.time(), server=ServerInfo(url="http://x"))
    return RunInfo(**(base | fields))


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# --- atomic writes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, failing):
    rd = RunDir(tmp_path)
    rd.save_summary(Summary(model="old"))
    before = rd.summary_json.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError, match="disk on fire"):
        rd.save_summary(Summary(model="new"))
    monkeypatch.undo()
    assert rd.summary_json.read_bytes() == before
    assert listing(tmp_path) == [SUMMARY_JSON]  # no .summary.json.*.tmp left behind


def test_save_run_info_is_atomic_too(tmp_path, monkeypatch):
    RunDir(tmp_path).save_run_info(run_info(status="complete"))
    before = (tmp_path / RUN_JSON).read_bytes()
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        RunDir(tmp_path).save_run_info(run_info(status="failed"))
    monkeypatch.undo()
    assert (tmp_path / RUN_JSON).read_bytes() == before and listing(tmp_path) == [RUN_JSON]


def test_writes_replace_whole_files_and_create_the_directory(tmp_path):
    rd = RunDir(tmp_path / "a" / "b")
    rd.write_text("tables/x.csv", "a,b\n")
    rd.write_json("x.json", {"k": [1, 2]})
    rd.write_json("x.json", {"k": 3})
    assert (rd.path / "tables" / "x.csv").read_text() == "a,b\n"
    assert json.loads((rd.path / "x.json").read_text()) == {"k": 3}
    assert oct((rd.path / "x.json").stat().st_mode & 0o777) == "0o644"
    assert rd.files() == ["tables/x.csv", "x.json"]


def test_summary_round_trips_byte_for_byte(tmp_path):
    rd = RunDir(tmp_path)
    summary = Summary(model="m", warnings=["ünïcode"], prompt_ingestion_tok_s=float("nan"))
    rd.save_summary(summary)
    assert rd.summary_json.read_text("utf-8") == summary.to_json()
    assert rd.load_summary().model == "m" and rd.load_summary().prompt_ingestion_tok_s is None


# --- schema versions and garbled files ------------------------------------------------------------------


def test_a_newer_summary_is_refused_in_one_line_naming_the_file(tmp_path):
    rd = RunDir(tmp_path)
    data = json.loads(Summary(model="m").to_json()) | {"schema_version": SUMMARY_SCHEMA_VERSION + 1, "new": {}}
    rd.write_json(SUMMARY_JSON, data)
    with pytest.raises(NewerSchemaError) as info:
        rd.load_summary()
    assert str(info.value) == (f"{rd.summary_json} was written by a newer cardgen (schema "
                               f"{SUMMARY_SCHEMA_VERSION + 1}; this one reads up to {SUMMARY_SCHEMA_VERSION}): "
                               "upgrade cardgen")
    assert isinstance(info.value, RenderError) and info.value.path == rd.summary_json


def test_a_newer_run_json_is_refused_even_when_it_would_not_validate(tmp_path):
    (tmp_path / RUN_JSON).write_text(json.dumps({"schema_version": RUN_SCHEMA_VERSION + 1, "renamed": 1}))
    with pytest.raises(NewerSchemaError, match=f"schema {RUN_SCHEMA_VERSION + 1}; this one reads up to 1"):
        RunDir(tmp_path).load_run_info()


def test_unknown_fields_of_the_same_version_are_ignored(tmp_path):
    data = json.loads(Summary(model="m").to_json()) | {"added_later": [1, 2]}
    (tmp_path / SUMMARY_JSON).write_text(json.dumps(data))
    assert RunDir(tmp_path).load_summary().model == "m"


@pytest.mark.parametrize("content, needle", [
    (b"{not json", "is not readable JSON (line 1 column 2"),
    (b'{"model": "m"', "is not readable JSON"),  # torn by a crash of an old, non-atomic writer
    (b"[1, 2]", "is not a JSON object"),
    (b'{"schema_version": "2", "model": "m"}', "schema_version is not a whole number"),
    (b'{"headline": 3}', f"does not fit schema {SUMMARY_SCHEMA_VERSION} (model: Field required)"),
    (b'\xff\xfe{"model": 1}', "not UTF-8 text"),
])
def test_a_garbled_summary_is_one_line_naming_the_file(tmp_path, content, needle):
    (tmp_path / SUMMARY_JSON).write_bytes(content)
    with pytest.raises(RunFileError) as info:
        RunDir(tmp_path).load_summary()
    message = str(info.value)
    assert needle in message and str(tmp_path / SUMMARY_JSON) in message and "\n" not in message


def test_missing_files_say_what_to_do(tmp_path):
    rd = RunDir(tmp_path)
    with pytest.raises(RunFileError, match="has no run.json: not a cardgen run directory"):
        rd.load_run_info()
    with pytest.raises(RunFileError, match="has no summary.json: analyse the run with 'cardgen render"):
        rd.load_summary()
    with pytest.raises(RunFileError, match=r"has no README.md \(the card\)"):
        rd.load_card()
    with pytest.raises(RunFileError, match="does not exist"):
        RunDir(tmp_path / "nope").load_run_info()


# --- a run whose writer is gone -------------------------------------------------------------------------


def test_a_run_killed_with_sigkill_reads_died_and_only_mark_died_writes_it(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "running"
        rd = RunDir(tmp_path)
        written = rd.load_run_info(as_written=True)
        assert (written.pid, written.hostname) == (child.pid, socket.gethostname())
        assert written.heartbeat_unix == pytest.approx(time.time(), abs=60)
        assert rd.load_run_info().status == "running"  # alive: still running
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    before = rd.run_json.read_bytes()
    assert rd.load_run_info().status == "died"
    assert rd.load_run_info(as_written=True).status == "running"
    assert rd.run_json.read_bytes() == before  # reading never rewrites the file
    marked = mark_died(tmp_path)  # what cardgen resume does first
    assert marked.status == "died" and any(f"pid {child.pid}" in w for w in marked.warnings)
    assert json.loads(rd.run_json.read_text())["status"] == "died"


def test_an_unreaped_killed_writer_reads_died(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "running"
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert RunDir(tmp_path).load_run_info().status == "died"  # a zombie has exited
    finally:
        child.kill()
        child.wait()


def test_a_recycled_pid_is_not_the_writer(tmp_path):
    """The pid is alive, but that process started after the writer's last sign of life: another process."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(other.pid).create_time()
        host = socket.gethostname()
        info = run_info(pid=other.pid, hostname=host, heartbeat_unix=started - 120, started_unix=started - 130)
        assert effective_status(info) == "died"
        assert effective_status(info.model_copy(update={"heartbeat_unix": started + 5})) == "running"
    finally:
        other.kill()
        other.wait()


def test_another_hosts_run_goes_stale_only_without_a_heartbeat():
    now = 1_900_000_000.0
    info = run_info(pid=1, hostname="gpu-box-elsewhere", heartbeat_unix=now - STALE_AFTER_S - 1)
    assert effective_status(info, now=now, host="here") == "stale"
    assert effective_status(info.model_copy(update={"heartbeat_unix": now - 5}), now=now, host="here") == "running"
    assert effective_status(run_info(), now=now, host="here") == "running"  # an old run.json: nothing to check
    for final in ("complete", "failed", "interrupted"):
        assert effective_status(run_info(status=final, pid=999_999_999, hostname="here"), host="here") == final


def test_only_a_running_save_signs_the_file(tmp_path):
    info = run_info(status="complete")
    RunDir(tmp_path).save_run_info(info)
    assert info.pid is None and json.loads((tmp_path / RUN_JSON).read_text())["pid"] is None
    running = run_info()
    RunDir(tmp_path).save_run_info(running)
    assert running.pid == os.getpid() and running.hostname == socket.gethostname()
    assert RunDir(tmp_path).load_run_info().status == "running"  # this very process is the writer


# --- a model's name as a folder name ----------------------------------------------------------------------


def test_slug_is_safe_for_any_model_name():
    assert slugify("codellama/CodeLlama-7b-Instruct-hf") == "codellama--codellama-7b-instruct-hf"
    for name in ["../../etc/passwd", "<script>alert(1)</script>", "", "...", "a" * 500, "模型", "x y\tz"]:
        s = slugify(name)
        assert s and s not in (".", "..") and "/" not in s and len(s) <= 80
        assert all(c.isalnum() or c in "-._" for c in s)
