"""`make bench`: run every ``bench_*.py`` module in this folder (each has ``main()`` that prints figures).

Run one: ``python tests/bench bench_load``. Benchmarks print figures; they are not pass/fail tests.
``python tests/bench --import-only`` imports each and runs none (a test does, so that none is left broken).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the helpers a benchmark shares with the tests (simruns), as pytest has it


def benchmarks() -> list[Path]:
    return sorted(HERE.glob("bench_*.py"))


def load(path: Path) -> ModuleType:
    """A benchmark's module, imported as ``make bench`` runs it."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    if argv == ["--import-only"]:  # each benchmark imports as make bench runs it (tests/packaging/test_bench.py)
        for path in benchmarks():
            load(path)
        return 0
    wanted = set(argv)
    for path in benchmarks():
        if wanted and path.stem not in wanted:
            continue
        mod = load(path)
        print(f"\n=== {path.stem} ===", flush=True)
        t0 = time.perf_counter()
        mod.main()
        print(f"--- {path.stem}: {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
