"""Modelled at scale (issue 40): what a run in virtual time costs, whole commands measured by ``/usr/bin/time -v``
(wall, user + sys CPU of every process, the peak resident memory of the largest) and by sampling the memory of all
of a command's processes together (a build on two cores computes its run in a second process), on this machine
(shared: wall times are noisy, CPU times less so).

1. The planner's suite (tests/bench/planner.yaml): an SLO search at 1024 / 128 tokens, TTFT p99 <= 1 s and TPOT
   p99 <= 50 ms at a 5 % resolution, a closed point and a 120-request trace, modelled CodeLlama-7b on an
   A100-80GB, card included; its bracket. The issue's goal: 60 s and 1 GB.
2. Memory that does not grow with the run: a closed loop of 64 users at 32 / 16 tokens, 100,000 requests and
   1,000,000 requests, computed and written (``--no-card``: the run's files, not the card's analysis, which
   still reads every record), their peak memory and its ratio (goal: within 1.5x).
3. A modelled ``full`` card (goal: 30 s).

Run alone: ``python tests/bench bench_scale`` (``BENCH_SCALE=planner,scale,full`` for some; ``BENCH_SCALE_BIG=200000``
for a smaller "large" run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL, GPU = "CodeLlama-7b", "A100-80GB"
PARTS = os.environ.get("BENCH_SCALE", "planner,scale,full").split(",")
SAMPLE_S = float(os.environ.get("BENCH_SCALE_SAMPLE_S", "1.0"))  # how often the memory of all processes is read
BIG = int(os.environ.get("BENCH_SCALE_BIG", "1000000"))
SCALE = """name: scale
scenarios:
  - {{kind: closed, name: scale, prompt_tokens: 32, output_tokens: 16, parallel: [64], min_requests: {n},
     max_requests: {n}}}
"""


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return out


def _pss_mb(pid: int) -> float:
    """Proportional set size of a process, MB (its share of pages it shares with a forked parent or child)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    match = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else 0.0


def timed(*args: str, out: Path) -> tuple[dict[str, float], subprocess.CompletedProcess[str]]:
    """``cardgen build MODEL ARGS --out OUT --quiet`` under ``/usr/bin/time -v``: wall s, cpu s (every process), peak
    MB of the largest process (``/usr/bin/time``), and the peak of all of its processes together (``tree_mb``: the
    sum of their proportional set sizes, sampled every SAMPLE_S; a modelled build on two cores is two processes)."""
    command = [sys.executable, "-m", "cardgen", "build", MODEL, "--gpu", GPU, *args, "--out", str(out), "--quiet"]
    if shutil.which("/usr/bin/time") is None:
        raise SystemExit("bench_scale needs /usr/bin/time (GNU time: apt-get install time)")
    child = subprocess.Popen(["/usr/bin/time", "-v", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    peak = [0.0]

    def sample() -> None:
        while child.poll() is None:
            peak[0] = max(peak[0], sum(_pss_mb(p) for p in _tree(child.pid)))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = child.communicate(timeout=3600)
    sampler.join()
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)

    def field(name: str) -> str:
        match = re.search(rf"{re.escape(name)}: (.+)", proc.stderr)
        return match.group(1).strip() if match else "0"

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {"wall": wall, "cpu": float(field("User time (seconds)")) + float(field("System time (seconds)")),
            "rss_mb": float(field("Maximum resident set size (kbytes)")) / 1024, "tree_mb": peak[0]}, proc


def requests_total(run_dir: Path) -> int:
    return int(json.loads((run_dir / "run.json").read_text())["requests_total"])


def line(label: str, t: dict[str, float], requests: int) -> str:
    return (f"{label:<34} wall {t['wall']:7.1f} s  cpu {t['cpu']:7.1f} s  peak {t['rss_mb']:6.0f} MB "
            f"(all processes {t['tree_mb']:6.0f} MB)  "
            f"{requests:>9,} requests  {requests / max(t['cpu'], 1e-9):8,.0f} requests/cpu-s  "
            f"load avg {os.getloadavg()[0]:.1f}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "planner" in PARTS:
            t, proc = timed("--suite", str(HERE / "planner.yaml"), out=root / "planner")
            if proc.returncode != 0:
                print(f"planner's suite failed: {proc.stderr.strip()[-300:]}")
            else:
                summary = json.loads((root / "planner" / "summary.json").read_text())
                (search,) = summary["kinds"]["slo"]["searches"]
                print(line("planner's suite (goal 60 s, 1 GB)", t, requests_total(root / "planner")))
                print(f"  bracket {search['low']:.4g}-{search['high']:.4g} req/s: {search['answer']}", flush=True)
            shutil.rmtree(root / "planner", ignore_errors=True)
        if "scale" in PARTS:
            peaks = {}
            for n in (100_000, BIG):
                suite = root / f"scale-{n}.yaml"
                suite.write_text(SCALE.format(n=n))
                t, proc = timed("--suite", str(suite), "--no-card", out=root / f"scale-{n}")
                if proc.returncode != 0:
                    print(f"{n:,} requests failed: {proc.stderr.strip()[-300:]}")
                    continue
                peaks[n] = max(t["rss_mb"], t["tree_mb"])  # the run's memory, all its processes
                print(line(f"closed loop, {n:,} requests", t, requests_total(root / f"scale-{n}")), flush=True)
                shutil.rmtree(root / f"scale-{n}", ignore_errors=True)
            if len(peaks) == 2:
                print(f"  peak memory of {BIG:,} requests / of 100,000: {peaks[BIG] / peaks[100_000]:.2f}x "
                      "(goal: at most 1.5x)", flush=True)
        if "full" in PARTS:
            t, proc = timed("--suite", "full", out=root / "full")
            print(line("full card (goal 30 s)", t, requests_total(root / "full")) if proc.returncode == 0
                  else f"full failed: {proc.stderr.strip()[-300:]}", flush=True)
