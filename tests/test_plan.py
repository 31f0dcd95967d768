"""``cardgen plan``: a cost plan from the virtual server in virtual time, before any server runs."""

import json
from functools import partial

import clirun
import pytest

from cardgen.numbers import duration_text
from cardgen.plan import format_plan, make_plan
from cardgen.sim.config import SimConfig
from cardgen.suite import load_suite, parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

TINY = """
name: tiny
scenarios:
  - kind: ingest
    prompt_tokens: [64, 512, 2048]
  - kind: closed
    prompt_tokens: 512
    output_tokens: 64
    parallel: [1, 4]
    min_requests: 4
"""


cardgen = partial(clirun.cardgen, timeout=300)  # plans of the full suite among them


def test_plan_json_lists_every_point_with_requests_and_seconds():
    out = cardgen("plan", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", "quick", "--json",
                  "--price-per-hour", "2")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    names = [p["name"] for p in plan["points"]]
    assert names[0] == "ingest" and "closed-in1024-out128-p10" in names
    assert all(p["requests"] > 0 and p["seconds"] > 0 for p in plan["points"])
    # the points run one after another: the total is at least their sum and not much more (pauses)
    total = sum(p["seconds"] for p in plan["points"])
    assert total <= plan["gpu_time_s"] <= total + 1.0 * len(names) + 1
    assert plan["cost"] == pytest.approx(plan["gpu_time_s"] / 3600 * 2)


def test_gpu_time_counts_every_gpu_and_a_slower_gpu_costs_more():
    suite = parse_suite(TINY, source="tiny")
    one = make_plan(suite, SimConfig(model="CodeLlama-7b", gpu="A100-80GB"))
    two = make_plan(suite, SimConfig(model="CodeLlama-7b", gpu="A100-80GB", tp=2))
    slow = make_plan(suite, SimConfig(model="CodeLlama-7b", gpu="L4"))
    assert two.gpu_time_s == pytest.approx(2 * two.wall_s, abs=2e-3)  # each rounded to the millisecond
    assert slow.gpu_time_s > 2 * one.gpu_time_s
    text = format_plan(one)
    assert "closed-in512-out64-p4" in text and "GPU-hours" in text


def test_bad_input_is_one_line():
    out = cardgen("plan", "CodeLlama-7b", "--gpu", "NoSuchGPU", "--suite", "quick")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "NoSuchGPU" in out.stderr


def test_duration_text():
    assert duration_text(45) == "45 s"
    assert duration_text(750) == "12 min 30 s"
    assert duration_text(3 * 3600 + 300) == "3 h 05 min"


def test_builtin_suites_plan_quickly_enough_to_print_before_a_build():
    plan = make_plan(load_suite("standard"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"))
    assert plan.requests > 0 and plan.gpu_time_s > 60


# CodeLlama-7b on an L4 (24 GB): its KV cache fills with a few dozen 2,048-token requests, and at 1 parallel a
# request is already slower than a user accepts (the saturation rule's speed): the larger counts are skipped
SATURATING = """
name: saturating
scenarios:
  - kind: closed
    prompt_tokens: 1024
    output_tokens: 1024
    parallel: [1, 16, 32, 64]
    min_requests: 1
"""


@pytest.mark.parametrize("flag", [(), ("--run-saturated",)])
def test_plan_lists_exactly_the_points_build_runs(tmp_path, flag):
    suite = tmp_path / "saturating.yaml"
    suite.write_text(SATURATING)
    common = ("CodeLlama-7b", "--gpu", "L4", "--suite", str(suite), "--engine", "vllm-0.6", *flag)
    planned = cardgen("plan", *common, "--json")
    built = cardgen("build", *common, "--out", str(tmp_path / "run"), "--no-card", "--quiet")
    assert planned.returncode == 0 and built.returncode == 0, planned.stderr + built.stderr
    plan = [(p["name"], p["skipped"] is None, p["requests"]) for p in json.loads(planned.stdout)["points"]]
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    run = [(p["name"], p["stop"] != "skipped", p["requests"]) for p in info["points"]]
    assert plan == run
    skipped = [name for name, runs, _ in run if not runs]
    assert (skipped == []) == bool(flag) and run[0][1]  # skipped only without --run-saturated
    assert info["sim"]["engine_profile"] == "vllm-0.6"


def test_an_unknown_engine_profile_is_a_one_line_error():
    for command in ("plan", "build"):
        proc = cardgen(command, "CodeLlama-7b", "--engine", "vllm-9.9", "--suite", "quick")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "unknown engine profile 'vllm-9.9'" in proc.stderr and "vllm-0.4" in proc.stderr


def test_an_slo_search_is_priced_by_the_requests_its_probes_send_within_its_budget():
    def planned(budget: int):
        suite = parse_suite(f"name: s\nscenarios:\n  - {{kind: slo, load: rate, prompt_tokens: 256, output_tokens: 16, "
                            f"slo: {{tpot_p99_s: 0.02}}, max_requests: {budget}}}\n", source="slo")
        (point,) = make_plan(suite, SimConfig(model="CodeLlama-7b", gpu="A100-80GB")).points
        return point
    small, large = planned(1500), planned(4500)
    assert 0 < small.requests <= 1500 < large.requests <= 4500  # a p99 near the limit takes all it may send
    assert large.seconds > small.seconds
