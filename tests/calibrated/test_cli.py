"""``--calibrate`` on the command line: one-line errors for what cannot work, and the calibrated plan."""

from __future__ import annotations

import json

import pytest
from clirun import cardgen

from cardgen.calibrated.plan import CalibratedPlan, PhasePoint, format_calibrated_plan

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


def run(*argv: str) -> tuple[int, str, str]:
    """The command's exit code, output and errors (``clirun.cardgen``: in a process of its own)."""
    proc = cardgen(*argv, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(("argv", "says"), [
    (["build", "CodeLlama-7b", "--calibrate"], "--calibrate measures a server"),
    (["build", "CodeLlama-7b", "--calibrate-tolerance", "0.1"], "--calibrate-tolerance applies to --calibrate"),
    (["build", "CodeLlama-7b", "--url", "http://127.0.0.1:9", "--calibrate", "--run-saturated"], "drop"),
    (["build", "no-such-model", "--url", "http://127.0.0.1:9", "--calibrate"], "--model-config"),
    (["build", "CodeLlama-7b", "--url", "http://127.0.0.1:9", "--calibrate", "--calibrate-tolerance", "2"],
     "between 0 and 1"),
    (["plan", "CodeLlama-7b", "--calibrate-tolerance", "0.1"], "--calibrate-tolerance applies to --calibrate"),
    (["plan", "CodeLlama-7b", "--calibrate", "--calibrate-tolerance", "0"], "between 0 and 1"),
])
def test_what_cannot_work_is_one_line(tmp_path, argv, says):
    code, _, err = run(*argv, "--out" if argv[0] == "build" else "--suite",
                       str(tmp_path / "run") if argv[0] == "build" else "quick")
    assert code != 0 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_calibrated_plan_lists_what_a_calibrated_build_measures():
    # one calibration in virtual time (about a minute on two cores): the JSON from the command line, the text
    # from the same plan by the function the command prints it with
    code, out, _ = run("plan", "CodeLlama-7b", "--suite", "quick", "--calibrate", "--json")
    assert code == 0
    plan = json.loads(out)
    assert [p["name"] for p in plan["identify"]] == ["ingest", "closed-in1024-out128-p1", "closed-in1024-out128-p4",
                                                     "closed-in1024-out128-p10"]
    assert plan["gpu_time_s"] >= sum(p["seconds"] for p in plan["identify"] + plan["spot_checks"])
    phases = {k: [PhasePoint(**p) for p in plan[k]] for k in ("identify", "spot_checks", "pairs")}
    fields = {k: v for k, v in plan.items() if k in CalibratedPlan.__dataclass_fields__}
    text = format_calibrated_plan(CalibratedPlan(**{**fields, **phases}))
    assert "Calibrated plan for CodeLlama-7b on 1x A100-80GB, suite 'quick'" in text
    assert "1. identify: 4 points" in text and "closed-in1024-out128-p10" in text
    assert "fit and prediction: the server waits" in text and "of GPU time" in text and "point by point" in text
    assert plan["goal_gpu_time_s"] == 1800
