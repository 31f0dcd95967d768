"""``make bench`` runs: every benchmark imports as ``python tests/bench`` runs it, outside pytest (whose rootdir
puts tests/ on the path for the tests alone). A helper moved under the tests once left it failing on its first
module, unseen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_imports_as_make_bench_runs_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "bench"), "--import-only"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((ROOT / "tests" / "bench").glob("bench_*.py"))) >= 10
