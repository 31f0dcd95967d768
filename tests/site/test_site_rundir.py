"""The site reads runs through RunDir: a run from a newer cardgen is skipped in one line, and a run whose
writer was killed shows its effective status ("died")."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys

import pytest

from cardgen.rundir import RUN_JSON, SUMMARY_JSON, RunDir
from cardgen.schemas import SUMMARY_SCHEMA_VERSION
from cardgen.site import gather_runs
from cardgen.site.pages import run_page
from cardgen.site.plan import plan_site
from cardgen.site.sample import write_sample_run

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


def edit_json(path, **fields) -> None:
    path.write_text(json.dumps(json.loads(path.read_text("utf-8")) | fields), "utf-8")


def test_site_runs_come_through_rundir(tmp_path, monkeypatch):
    good = write_sample_run(tmp_path, gpu="A100-80GB")
    newer = write_sample_run(tmp_path, gpu="H100", started=dt.datetime(2026, 11, 22, tzinfo=dt.UTC))
    edit_json(newer / SUMMARY_JSON, schema_version=7)
    killed = write_sample_run(tmp_path, gpu="L4", started=dt.datetime(2026, 11, 23, tzinfo=dt.UTC))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    edit_json(killed / RUN_JSON, status="running", pid=dead.pid, hostname=socket.gethostname())

    seen = []
    load_summary = RunDir.load_summary
    monkeypatch.setattr(RunDir, "load_summary", lambda self: seen.append(self.path) or load_summary(self))
    gathered = gather_runs(tmp_path)

    assert sorted(seen) == sorted([good, newer, killed])
    assert [r.run_dir for r in gathered.runs] == [good, killed]
    assert gathered.skipped == [f"skipping: {newer / SUMMARY_JSON} was written by a newer cardgen (schema 7; this "
                                f"one reads up to {SUMMARY_SCHEMA_VERSION}): upgrade cardgen"]
    status = {r.run_dir: r.status for r in gathered.runs}
    assert status == {good: "complete", killed: "died"}
    planned = {p.run.run_dir: p for p in plan_site(gathered.runs).runs}
    assert "Status: <strong>died</strong>" in run_page(planned[killed], "# card\n", []).text()
    assert "Status:" not in run_page(planned[good], "# card\n", []).text()


def test_a_run_json_the_site_cannot_read_falls_back_to_the_summarys_status(tmp_path):
    run = write_sample_run(tmp_path)
    (run / RUN_JSON).write_text("{garbled", "utf-8")
    (site_run,) = gather_runs(tmp_path).runs
    assert site_run.status == site_run.summary.run_status
