"""How fast the virtual server runs in virtual time: what a modelled card, a plan and a calibration's fit wait on.

1. One engine step of 256 decoding sequences (the scheduler and a fixed performance model): the best of 5 times
   20 steps. It was a unit test's bound (under 1 ms); a bound on the time of a shared machine is a benchmark's.
2. The quick suite on CodeLlama-7b / A100-80GB driven in virtual time (steps varying by 2 %, no scrapes kept, as
   a plan drives it): its engine steps, requests and the steps per second of this machine.
3. ``cardgen plan CodeLlama-7b --suite quick --calibrate``, whole command: a calibrated build's plan simulates the
   build, the fit included (every fit evaluation replays the measured points).

Run alone: ``python tests/bench bench_virtual``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from cardgen.points import expand, fit_context
from cardgen.sim.config import SimConfig, build_perf, max_model_len
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.modelled import MODELLED_STEP_JITTER
from cardgen.sim.perf import FixedPerf
from cardgen.sim.scheduler import Scheduler, Seq
from cardgen.suite import load_suite

MODEL, GPU = "CodeLlama-7b", "A100-80GB"


def step_256() -> float:
    """Seconds per step of 256 decoding sequences, best of 5 x 20."""
    perf = FixedPerf(prefill_tok_s=10_000.0, step_overhead_s=0.01, per_seq_s=0.001, block_size=16,
                     kv_capacity_tokens=1 << 20, max_num_seqs=256, max_num_batched_tokens=1 << 16)
    s = Scheduler(perf)
    for _ in range(256):
        s.add(Seq(100, 10_000))
    step = s.next_step()
    assert step is not None
    s.finish_step(step)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            step = s.next_step()
            assert step is not None
            s.finish_step(step)
        best = min(best, (time.perf_counter() - t0) / 20)
    return best


def quick_suite() -> tuple[int, int, float]:
    """The quick suite in virtual time: engine steps, requests, seconds."""
    config = SimConfig(model=MODEL, gpu=GPU)
    perf = build_perf(config)
    points, _ = fit_context(expand(load_suite("quick")), max_model_len(config, perf))
    t0 = time.perf_counter()
    run = drive(points, config, perf=perf, options=DriveOptions(step_jitter=MODELLED_STEP_JITTER, scrapes=False))
    return run.server.scheduler.num_steps, len(run.requests), time.perf_counter() - t0


def calibrated_plan() -> tuple[float, float | None]:
    """``cardgen plan --calibrate`` on the quick suite: the command's wall seconds, and what it says it took."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cardgen", "plan", MODEL, "--suite", "quick", "--calibrate",
                           "--json"], capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout).get("computed_in_s")


def main() -> None:
    print(f"one step of 256 decoding sequences: {step_256() * 1e3:.3f} ms (best of 5 x 20)")
    steps, requests, seconds = quick_suite()
    print(f"quick suite in virtual time: {steps:,} steps, {requests:,} requests in {seconds:.2f} s "
          f"({steps / seconds:,.0f} steps/s)")
    wall, computed = calibrated_plan()
    print(f"cardgen plan --suite quick --calibrate: {wall:.1f} s wall (computed in {computed} s, as it says)")


if __name__ == "__main__":
    main()
