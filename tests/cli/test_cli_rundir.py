"""The command line over RunDir: one-line errors for newer or garbled files, the effective status of a killed
run on the card, and ``build --out`` under folders that do not exist yet."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cardgen.cli.main import main
from cardgen.cli.render import headline_text
from cardgen.errors import NewerSchemaError
from cardgen.rundir import CARD_MD, RUN_JSON, SUMMARY_JSON, RunDir
from cardgen.schemas import Summary

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "run_small"
CARDGEN = [sys.executable, "-m", "cardgen"]


def cardgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CARDGEN, *args], capture_output=True, text=True, timeout=timeout)


def edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps(json.loads(path.read_text("utf-8")) | fields, indent=2), "utf-8")


@pytest.fixture
def run(tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


def test_render_of_a_run_from_a_newer_cardgen_is_one_line(run):
    edit_json(run / RUN_JSON, schema_version=3)
    proc = cardgen("render", str(run))
    assert proc.returncode == 5
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.strip() == (f"cardgen: error: {run / RUN_JSON} was written by a newer cardgen (schema 3; "
                                   "this one reads up to 1): upgrade cardgen")
    assert not (run / SUMMARY_JSON).exists() and not (run / CARD_MD).exists()  # nothing half-rendered


def test_render_of_a_garbled_run_json_is_one_line(run, capsys):
    (run / RUN_JSON).write_text('{"schema_version": 1, "model": ', "utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 5 and len(err.strip().splitlines()) == 1
    assert f"{run / RUN_JSON} is not readable JSON" in err


def test_the_card_of_a_killed_run_says_died(run, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid now names no process (or, recycled, a later one): the writer is gone
    edit_json(run / RUN_JSON, status="running", pid=dead.pid, hostname=socket.gethostname(),
              heartbeat_unix=json.loads((run / RUN_JSON).read_text())["started_unix"])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790035200")
    main(["render", str(run)])
    summary = RunDir(run).load_summary()
    assert summary.run_status == "died"
    assert "| Run status | died |" in (run / CARD_MD).read_text("utf-8")
    assert json.loads((run / RUN_JSON).read_text())["status"] == "running"  # render does not rewrite it


def test_headline_reads_the_summary_through_rundir(tmp_path):
    data = json.loads(Summary(model="m").to_json()) | {"schema_version": 99}
    (tmp_path / SUMMARY_JSON).write_text(json.dumps(data))
    with pytest.raises(NewerSchemaError, match="schema 99"):
        headline_text(tmp_path)


def test_build_out_under_missing_folders_is_not_refused(tmp_path):
    out = tmp_path / "runs" / "a" / "b"
    proc = cardgen("build", "m", "--url", "http://127.0.0.1:9", "--suite", "quick", "--out", str(out))
    assert proc.returncode == 3 and "cannot connect" in proc.stderr, proc.stderr  # it went on to the server
    assert "--out" not in proc.stderr


def test_build_out_under_a_file_is_refused_before_any_server_is_asked(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    proc = cardgen("build", "m", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "runs" / "a"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'runs'} is not a directory" in proc.stderr
