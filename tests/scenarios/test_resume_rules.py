"""Resuming a run, in virtual time: a modelled run cut off by Ctrl-C mid-point keeps every point that ended on
disk; ``cardgen resume`` continues it where it stopped. Nothing that was on disk is lost or rewritten, no finished
point is sent again, the cut-off point runs again as its next attempt (its earlier records kept, superseded), and
the run ends complete with its card. The rules are the controller's (``cardgen.scenarios.resume``), the same for
a measured run, and the run writer (``cardgen.runwriter``) does their file work; the load stage's crash test
(``kill -9``) is in tests/load/test_resume.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import cardgen

from cardgen.buildconfig import BuildConfig, SuiteChoice, VirtualTarget
from cardgen.errors import UsageError
from cardgen.points import expand
from cardgen.rundir import RunDir
from cardgen.runinfo import begin_run_info
from cardgen.runwriter import check_resumable, plan_resume
from cardgen.scenarios.resume import refusal, resume_plan
from cardgen.schemas.run import PointOutcome, ServerInfo
from cardgen.sim import drive as drive_module
from cardgen.sim.modelled import ModelledServer, build_run, resume_modelled
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = parse_suite("""name: resumable
scenarios:
- {kind: closed, name: pair, prompt_tokens: 64, output_tokens: 64, parallel: [1, 2, 4], min_requests: 12}
- {kind: open, name: poisson, prompt_tokens: 64, output_tokens: 32, rates: [8], num_requests: 12}
""", source="test")
SERVER = ModelledServer(model="CodeLlama-7b", gpu="A100-80GB")
BUILD = BuildConfig(model="CodeLlama-7b", suite=SuiteChoice(name="resumable", spec=SUITE), target=VirtualTarget())
T0 = 1_800_000_000.0


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def cut_off_run(out: Path, monkeypatch: pytest.MonkeyPatch, *, after: int) -> None:
    """A modelled run of SUITE, interrupted (as Ctrl-C would) as its ``after``-th request ends."""
    complete = drive_module.VirtualInterpreter._complete
    ended = {"n": 0}

    def interrupted(self, *args, **kwargs):
        ended["n"] += 1
        if ended["n"] == after:
            raise KeyboardInterrupt
        return complete(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(drive_module.VirtualInterpreter, "_complete", interrupted)
        with pytest.raises(KeyboardInterrupt):
            build_run(SERVER, BUILD, out, argv=["cardgen", "build", "CodeLlama-7b"], started_unix=T0)


def test_ctrl_c_mid_point_then_resume_completes_with_nothing_lost_and_nothing_repeated(tmp_path, monkeypatch):
    out = tmp_path / "run"
    files = RunDir(out)
    cut_off_run(out, monkeypatch, after=20)  # 12 requests in the first point, the second point under way
    info = files.load_run_info()
    assert info.status == "interrupted" and info.clock == "virtual"
    again = cardgen("build", "CodeLlama-7b", "--suite", "quick", "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"holds a run that was interrupted: continue it with 'cardgen resume {out}'" in again.stderr

    before = {name: (out / name).read_bytes() for name in ("requests.jsonl", "server_metrics.jsonl")}
    finished = {p.name for p in info.points if p.ended_unix is not None}
    old = records(files.requests_jsonl)
    cut = {r["scenario"] for r in old} - finished
    assert finished == {"closed-in64-out64-p1"} and cut == {"closed-in64-out64-p2"}, (finished, cut)
    assert {r["attempt"] for r in old} == {0}

    done = cardgen("resume", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(out)
    info = files.load_run_info()
    assert info.status == "complete"
    for name, data in before.items():  # every byte that was on disk is still there, at the same place
        assert (out / name).read_bytes()[: len(data)] == data, name
    new = records(files.requests_jsonl)
    added = new[len(old):]
    assert new[: len(old)] == old and not [r for r in added if r["scenario"] in finished]
    outcomes = {p.name: p for p in info.points}
    assert outcomes["closed-in64-out64-p2"].attempt == 1 and outcomes["closed-in64-out64-p2"].ended_unix
    assert {r["attempt"] for r in added if r["scenario"] == "closed-in64-out64-p2"} == {1}
    superseded = sum(1 for r in old if r["scenario"] == "closed-in64-out64-p2")
    assert superseded > 0 and all(p.ended_unix is not None for p in info.points) and len(info.points) == 4
    assert info.requests_total == len(new) - superseded  # the whole run's tallies, superseded records left out
    assert any("resumed with cardgen resume" in w and "runs again as attempt 1" in w for w in info.warnings)
    assert files.card_md.is_file() and files.summary_json.is_file()

    refused = cardgen("resume", str(out))  # resuming a complete run is refused, in one line, and changes nothing
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "is complete" in refused.stderr
    assert records(files.requests_jsonl) == new


def test_a_resumed_run_ends_with_the_points_an_uninterrupted_run_has(tmp_path, monkeypatch):
    whole = build_run(SERVER, BUILD, tmp_path / "whole", argv=["cardgen"], started_unix=T0).info
    cut_off_run(tmp_path / "cut", monkeypatch, after=40)
    resumed = resume_modelled(tmp_path / "cut", check_resumable(tmp_path / "cut"), started_unix=T0 + 3600)
    assert [(p.name, p.stop, p.requests) for p in resumed.points] == [
        (p.name, p.stop, p.requests) for p in whole.points]
    assert resumed.requests_total == whole.requests_total


def test_a_resumed_virtual_run_refuses_a_server_url(tmp_path, monkeypatch):
    cut_off_run(tmp_path / "run", monkeypatch, after=5)
    refused = cardgen("resume", str(tmp_path / "run"), "--url", "http://127.0.0.1:9")
    assert refused.returncode == 2 and "modelled in virtual time" in refused.stderr


def test_the_resume_plan_reruns_the_cut_off_point_and_skips_what_ended():
    points = expand(SUITE)
    info = modelled_info(points, [
        PointOutcome(name=points[0].name, kind="closed", started_unix=1.0, ended_unix=2.0, stop="minimum reached"),
        PointOutcome(name=points[1].name, kind="closed", started_unix=2.0, attempt=1),  # cut off, attempt 1
        PointOutcome(name=points[2].name, kind="closed", stop="skipped", detail="saturated"),
        PointOutcome(name=points[3].name, kind="open"),
    ])
    plan = resume_plan(info, points)
    assert [p.name for p in plan.to_run] == [points[1].name, points[3].name] and plan.done == 2
    assert plan.attempts == {points[0].name: 0, points[1].name: 2, points[2].name: 0, points[3].name: 0}
    assert plan.unknown == () and refusal(info, "interrupted") is None
    stranger = modelled_info(points, [PointOutcome(name="closed-in9-out9-p9", kind="closed")])
    assert resume_plan(stranger, points).unknown == ("closed-in9-out9-p9",)  # the rule says; the writer refuses
    with pytest.raises(UsageError, match="names points this cardgen does not plan"):
        plan_resume(stranger, points)


def test_which_runs_may_be_resumed_is_a_rule_on_run_json_alone():
    points = expand(SUITE)
    info = modelled_info(points, [PointOutcome(name=points[0].name, kind="closed")])
    assert [refusal(info, s) for s in ("running", "complete", "died", "interrupted", "stale")] == [
        "running", "complete", None, None, None]
    assert refusal(modelled_info(points, []), "died") == "unrecorded"


def modelled_info(points, outcomes):
    return begin_run_info(argv=["cardgen"], model="m", suite=SUITE, server=ServerInfo(url="http://x"),
                          started_unix=T0, clock="virtual", modelled=True, points=outcomes)
