"""Modelled cards in seconds (issue: one scenario program, two clocks): the wall time of ``cardgen build MODEL``
with no server, computed in virtual time, whole command included (start-up, the run, the card), on this
machine, for the built-in suites on CodeLlama-7b / A100-80GB, beside the GPU time the same suite would take on a
real server (its plan). Targets: quick in at most 10 s, full in at most 60 s. Then three GPUs in one command.

Run alone: ``python tests/bench bench_modelled`` (``BENCH_MODELLED_SUITES=quick`` for fewer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cardgen.numbers import duration_text
from cardgen.runinfo import load_seconds
from cardgen.schemas.run import RunInfo

MODEL, GPU = "CodeLlama-7b", "A100-80GB"
SUITES = os.environ.get("BENCH_MODELLED_SUITES", "quick,standard,full").split(",")
TARGETS = {"quick": 10.0, "full": 60.0}


def build(*args: str, out: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cardgen", "build", MODEL, *args, "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, proc


def main() -> None:
    print(f"{'suite':<9} {'wall (this machine)':>20} {'target':>8} {'requests':>9} {'GPU time modelled':>18} "
          f"{'load avg':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in SUITES:
            wall, proc = build("--gpu", GPU, "--suite", name, out=Path(tmp) / name)
            if proc.returncode != 0:
                print(f"{name:<9} failed: {proc.stderr.strip()[-300:]}")
                continue
            info = RunInfo.model_validate(json.loads((Path(tmp) / name / "run.json").read_text()))
            target = TARGETS.get(name)
            print(f"{name:<9} {wall:>18.1f} s {(f'{target:.0f} s' if target else '-'):>8} {info.requests_total:>9} "
                  f"{duration_text(load_seconds(info)):>18} {os.getloadavg()[0]:>9.2f}", flush=True)
        wall, proc = build("--gpu", "A100-80GB,H100,L40S", "--suite", "quick", out=Path(tmp) / "three")
        runs = sorted(p.name for p in (Path(tmp) / "three").iterdir()) if proc.returncode == 0 else []
        print(f"quick on A100-80GB,H100,L40S in one command: {wall:.1f} s, runs {runs}"
              if proc.returncode == 0 else f"three GPUs failed: {proc.stderr.strip()[-300:]}")
