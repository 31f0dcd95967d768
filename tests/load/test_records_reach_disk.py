"""No record vanishes: a record path broken on purpose fails the run loudly, with the number of records that
are on disk, in one process and in a worker; run.json says who is writing it while the run goes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from loadkit import read_records, sim_server

# the load stage as a process, in real time: durability when a record cannot be written, the heartbeat, kill -9
pytestmark = [pytest.mark.slow, pytest.mark.wire]  # kills and broken paths: nothing here is timed

HEARTBEAT_S = 5.0  # cardgen.load.stage.HEARTBEAT_S (importing it here would monkey-patch the test process)
SUITE = ("name: t\nscenarios:\n- {kind: closed, prompt_tokens: 16, output_tokens: 8, parallel: 4, "
         "min_requests: 60}\n")


def build_env(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cardgen", "build", *args, "--no-card", "--quiet"],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_broken_record_path_fails_the_run_with_the_count_on_disk(tmp_path, write_suite, workers):
    suite = write_suite(SUITE)
    out = tmp_path / "run"
    with sim_server(tmp_path) as (sim, _):
        proc = build_env("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(out),
                         "--workers", workers, env={"CARDGEN_FAULT_RECORD_AT": "5"})
    assert proc.returncode == 4, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "CARDGEN_FAULT_RECORD_AT=5" in lines[0]
    if workers != "0":
        assert re.search(r"load worker worker-\d could not deliver a record", lines[0]), lines[0]
    found = re.search(r"(\d+) records are on disk in (\S+)", lines[0])
    assert found, lines[0]
    on_disk = (out / "requests.jsonl").read_text().splitlines()
    assert len(on_disk) == int(found.group(1)) >= 4  # the 4 before the broken one at least
    assert len(read_records(out)) == len(on_disk)  # every line whole
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["requests_total"] == len(on_disk)


def test_out_with_missing_parents_is_created(tmp_path, write_suite):
    suite = write_suite("name: t\nscenarios:\n- {kind: closed, prompt_tokens: 16, output_tokens: 4, parallel: 1, "
                        "min_requests: 2}\n")
    out = tmp_path / "runs" / "deeper" / "a"
    with sim_server(tmp_path) as (sim, _):
        proc = build_env("test-model", "--url", sim.url, "--suite", str(suite), "--out", str(out), env={})
    assert proc.returncode == 0, proc.stderr
    assert len(read_records(out)) == 2 and json.loads((out / "run.json").read_text())["status"] == "complete"


def test_run_json_is_signed_and_its_heartbeat_refreshed_while_the_run_goes(tmp_path, write_suite):
    suite = write_suite("name: t\nscenarios:\n- {kind: closed, prompt_tokens: 16, output_tokens: 8, parallel: 2, "
                        f"min_requests: 2, min_duration_s: {HEARTBEAT_S + 2}}}\n")  # two beats and a margin
    out = tmp_path / "run"
    seen: list[dict] = []
    with sim_server(tmp_path) as (sim, _):
        proc = subprocess.Popen([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url,
                                 "--suite", str(suite), "--out", str(out), "--no-card", "--quiet"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while proc.poll() is None:
                try:
                    seen.append(json.loads((out / "run.json").read_text()))
                except (FileNotFoundError, json.JSONDecodeError):
                    pass  # not written yet (run.json is replaced whole: never half a file)
                time.sleep(0.25)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    running = [r for r in seen if r["status"] == "running"]
    assert running and all(r["pid"] == proc.pid and r["hostname"] for r in running)
    beats = sorted({r["heartbeat_unix"] for r in running})
    assert len(beats) >= 2 and beats[-1] - beats[0] >= HEARTBEAT_S - 1
    final = json.loads((out / "run.json").read_text())
    assert final["status"] == "complete"


def test_a_run_killed_with_sigkill_reads_died_not_running(tmp_path, write_suite):
    from cardgen.rundir import RunDir

    suite = write_suite("name: t\nscenarios:\n- {kind: closed, prompt_tokens: 16, output_tokens: 40, parallel: 2, "
                        "min_requests: 1000}\n")
    out = tmp_path / "run"
    with sim_server(tmp_path) as (sim, _):
        proc = subprocess.Popen([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url,
                                 "--suite", str(suite), "--out", str(out), "--no-card", "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while time.time() < deadline and not (
                    (out / "requests.jsonl").exists() and len(read_records(out)) >= 3):
                time.sleep(0.1)
            proc.kill()  # SIGKILL: no chance to write an end
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    written = json.loads((out / "run.json").read_text())
    assert written["status"] == "running" and written["pid"] == proc.pid
    assert RunDir(out).load_run_info().status == "died"
