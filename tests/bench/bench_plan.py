"""What a definitive card costs (issue: a definitive card in 30 minutes of GPU time).

1. For the built-in suites, the planned GPU time on CodeLlama-7b / A100-80GB (``cardgen plan``), and the
   precision the suite reaches: the same suite driven in virtual time (steps varying by 2 %), then the 95 %
   half-widths of the headline figures by the card's own methods (``cardgen.precision``): median speed from
   start and median TTFT of the reference point (1024 in, 128 out, 10 parallel), the worst over every closed
   point that ran, and the ingestion slope.
2. Planned against measured: a small suite run for real against the virtual server (``cardgen build
   --real-time``, over HTTP, this machine's two cores shared by server and client) next to its plan.

Run alone: ``python tests/bench bench_plan`` (``BENCH_PLAN_SUITES=quick,standard`` to leave out full).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cardgen.numbers import duration_text
from cardgen.plan import make_plan
from cardgen.points import expand, fit_context
from cardgen.precision import closed_figures, median_interval, slope_interval
from cardgen.rundir import RunDir
from cardgen.sim.config import SimConfig, build_perf, max_model_len
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.modelled import MODELLED_STEP_JITTER as PLAN_STEP_JITTER
from cardgen.suite import load_suite, parse_suite

MODEL, GPU = "CodeLlama-7b", "A100-80GB"
REFERENCE = "closed-in1024-out128-p10"
SUITES = os.environ.get("BENCH_PLAN_SUITES", "quick,standard,full").split(",")

MEASURED_SUITE = """
name: bench-plan
scenarios:
  - kind: ingest
    prompt_tokens: [64, 512, 1024, 2048]
  - kind: closed
    prompt_tokens: 1024
    output_tokens: 64
    parallel: [1, 4, 10]
    min_requests: 1
    target_ci: 0.05
    max_requests: 120
    max_duration_s: 30
  - kind: open
    prompt_tokens: 512
    output_tokens: 32
    rates: [8]
    num_requests: 40
"""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"+-{value * 100:.1f} %"


def precision_reached(suite_name: str) -> dict[str, float | None]:
    config = SimConfig(model=MODEL, gpu=GPU)
    perf = build_perf(config)
    points, _ = fit_context(expand(load_suite(suite_name)), max_model_len(config, perf))
    run = drive(points, config, perf=perf, options=DriveOptions(step_jitter=PLAN_STEP_JITTER, scrapes=False))
    by_point: dict[str, list] = {}
    for d in run.requests:
        by_point.setdefault(d.record.scenario, []).append(d.record)
    out: dict[str, float | None] = {"ref_speed": None, "ref_ttft": None, "worst_speed": None, "worst_ttft": None,
                                    "slope": None}
    worst_speed = worst_ttft = 0.0
    for point in points:
        records = by_point.get(point.name, [])
        if point.kind == "closed" and records:
            speeds, ttfts = closed_figures(records, parallel=point.parallel or 1, running=False)
            s = median_interval(speeds, parallel=point.parallel or 1)
            t = median_interval(ttfts, parallel=point.parallel or 1)
            if point.name == REFERENCE:
                out["ref_speed"], out["ref_ttft"] = (s and s.relative), (t and t.relative)
            worst_speed = max(worst_speed, s.relative if s else 0.0)
            worst_ttft = max(worst_ttft, t.relative if t else 0.0)
        elif point.kind == "ingest":
            ok = [r for r in records if r.ok]
            iv = slope_interval([r.prompt_tokens for r in ok], [r.first_token_at - r.sent_at for r in ok])
            out["slope"] = iv and iv.relative
    out["worst_speed"], out["worst_ttft"] = worst_speed, worst_ttft
    return out


def planned_vs_measured() -> None:
    suite = parse_suite(MEASURED_SUITE, source="bench")
    plan = make_plan(suite, SimConfig(model=MODEL, gpu=GPU))
    with tempfile.TemporaryDirectory() as tmp:
        suite_file = Path(tmp) / "suite.yaml"
        suite_file.write_text(MEASURED_SUITE)
        out = Path(tmp) / "run"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cardgen", "build", MODEL, "--gpu", GPU, "--suite",
                               str(suite_file), "--out", str(out), "--no-card", "--quiet", "--real-time"],
                              capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(f"build failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
            return
        info = RunDir(out).load_run_info()
        ran = [p for p in info.points if p.started_unix is not None and p.ended_unix is not None]
        if ran:
            measured = max(p.ended_unix for p in ran) - min(p.started_unix for p in ran)
            basis = "first point's start to last point's end (run.json points)"
        else:
            measured = (info.ended_unix or 0) - info.started_unix
            basis = "run.json started..ended (includes start-up)"
    err = (plan.wall_s - measured) / measured * 100 if measured else float("nan")
    print(f"planned {plan.wall_s:.1f} s, measured {measured:.1f} s ({basis}); plan error {err:+.1f} % "
          f"(whole command {wall:.1f} s with server start and prompt sizing)")
    print("per point (planned s):", ", ".join(f"{p.name} {p.seconds:.1f}" for p in plan.points))
    if ran:
        print("per point (measured s):", ", ".join(f"{p.name} {p.ended_unix - p.started_unix:.1f}" for p in ran))


def main() -> None:
    print(f"{'suite':<9} {'planned GPU time':>17} {'requests':>9} {'ref speed':>10} {'ref TTFT':>10} "
          f"{'worst speed':>12} {'worst TTFT':>11} {'slope':>9}")
    for name in SUITES:
        plan = make_plan(load_suite(name), SimConfig(model=MODEL, gpu=GPU))
        p = precision_reached(name)
        print(f"{name:<9} {duration_text(plan.gpu_time_s):>17} {plan.requests:>9} {_pct(p['ref_speed']):>10} "
              f"{_pct(p['ref_ttft']):>10} {_pct(p['worst_speed']):>12} {_pct(p['worst_ttft']):>11} "
              f"{_pct(p['slope']):>9}", flush=True)
    print("(95 % half-widths, relative; 'worst' over every closed point that ran; the reference point is "
          f"{REFERENCE})")
    planned_vs_measured()


if __name__ == "__main__":
    main()
