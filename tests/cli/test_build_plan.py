"""``cardgen build`` says what the run will cost before it runs, when it can model it: always on the virtual
server; against a real server only for a model the virtual server knows and a GPU given with --gpu. The progress
shows the time left against the plan."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from cardgen.cli.planning import BackgroundPlan
from cardgen.load.progress import PlannedTime, PointProgress
from cardgen.points import expand
from cardgen.sim.launch import running_sim
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = ("name: tiny\nscenarios:\n- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: [1, 2], "
         "min_requests: 4}\n")
PLAN_LINE = re.compile(r"^plan: 2 points, ~\d+ s of GPU time \(modelled(.*)\)$", re.MULTILINE)


def build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cardgen", "build", *args, "--no-card"], capture_output=True,
                          text=True, timeout=300)


def test_a_modelled_build_is_its_plan_computed_in_virtual_time(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    proc = build("CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    said = re.search(r"computed in [\d.]+ s; on a real server the suite would take ~(\d+) s of GPU time \(modelled\)",
                     proc.stderr)
    planned = subprocess.run([sys.executable, "-m", "cardgen", "plan", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite",
                              str(suite), "--json"], capture_output=True, text=True, timeout=120)
    assert said and planned.returncode == 0, proc.stderr + planned.stderr
    plan = json.loads(planned.stdout)
    assert int(said.group(1)) == round(plan["gpu_time_s"])  # the same run: the plan is what the build computes
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [p["requests"] for p in info["points"]] == [p["requests"] for p in plan["points"]]
    assert info["clock"] == "virtual" and "plan:" not in proc.stderr


@pytest.mark.wire
def test_a_real_time_build_of_the_virtual_server_prints_the_plan_and_then_planned_against_measured(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    proc = build("CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(suite), "--out", str(tmp_path / "run"),
                 "--real-time")
    assert proc.returncode == 0, proc.stderr
    found = PLAN_LINE.search(proc.stderr)
    assert found and found.group(1) == "", proc.stderr
    assert re.search(r"the load took \d+ s of GPU time \(planned ~\d+ s\)", proc.stderr), proc.stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["clock"] == "real"


@pytest.mark.wire
def test_build_against_a_real_server_plans_only_a_known_model_on_a_given_gpu(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    with running_sim(["CodeLlama-7b", "--gpu", "A100-80GB", "--max-lifetime-s", "300"]) as sim:
        given = build("CodeLlama-7b", "--url", sim.url, "--gpu", "A100-80GB", "--suite", str(suite), "--out",
                      str(tmp_path / "given"))
        default = build("CodeLlama-7b", "--url", sim.url, "--suite", str(suite), "--out", str(tmp_path / "default"))
    assert given.returncode == 0 and default.returncode == 0, given.stderr + default.stderr
    found = PLAN_LINE.search(given.stderr)
    assert found and found.group(1) == " by the virtual server for CodeLlama-7b on 1x A100-80GB", given.stderr
    assert "plan:" not in default.stderr  # --gpu not given: the GPU is not known, nothing is said


@pytest.mark.wire
def test_an_unknown_model_on_a_real_server_is_not_planned(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    with running_sim(["test-model", "--perf", "fixed", "--max-lifetime-s", "300"]) as sim:
        proc = build("test-model", "--url", sim.url, "--gpu", "A100-80GB", "--suite", str(suite), "--out",
                     str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert "plan:" not in proc.stderr and "planned" not in proc.stderr


def test_time_left_is_the_planned_seconds_of_the_points_not_yet_done():
    points = expand(parse_suite("name: t\nscenarios:\n- {kind: closed, prompt_tokens: 8, output_tokens: 4, "
                                "parallel: [1, 2, 4, 8], min_requests: 8}\n"))
    names = [p.name for p in points]
    plan = PlannedTime(seconds_by_point=dict(zip(names, (10.0, 20.0, 30.0, 40.0), strict=True)), gpu_time_s=100.0,
                       line="plan: 4 points, ~1 min 40 s of GPU time (modelled)")
    known: list[PlannedTime | None] = [None]
    progress = PointProgress(quiet=True, plan=lambda: known[0], points=names)
    progress.start(points[0])
    assert progress.time_left_s() is None  # no plan yet
    known[0] = plan
    progress.end(points[0])
    assert progress.plan is plan and progress.time_left_s() == 90.0
    progress.start(points[1])
    assert progress.time_left_s(now=progress.t0 + 5) == 15.0 + 30.0 + 40.0
    assert progress.time_left_s(now=progress.t0 + 50) == 70.0  # late: the running point counts as done
    progress.end(points[1])
    progress.start(points[3])  # points[2] was skipped: it is no longer ahead
    assert progress.time_left_s(now=progress.t0) == 40.0


def test_a_plan_that_comes_after_the_load_is_said_once_after_it(tmp_path):
    """A run shorter than its planning (the tiny suite's load takes about 1 s) ends before the planner: the plan
    is waited for and its line is still to be said. One the progress display was given is not said again."""
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    argv = ["CodeLlama-7b", "--gpu", "A100-80GB", "--tp", "1", "--engine", "vllm"]
    late_plan = BackgroundPlan(argv, suite=str(suite), modelled_as="modelled")
    try:
        planned, late = late_plan.after_load()  # nothing asked it during the load
    finally:
        late_plan.close()
    assert late and planned is not None and PLAN_LINE.search(planned.line), planned
    given_plan = BackgroundPlan(argv, suite=str(suite), modelled_as="modelled")
    try:
        given_plan.process.wait(timeout=120)
        assert given_plan() is not None  # the progress display was given it, and said its line
        planned, late = given_plan.after_load()
    finally:
        given_plan.close()
    assert planned is not None and not late
