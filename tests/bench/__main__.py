"""`make bench`: run every ``bench_*.py`` module in this folder (each has ``main()`` that prints figures).

Run one: ``python tests/bench bench_load``. Benchmarks print figures; they are not pass/fail tests.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    wanted = set(argv)
    mods = sorted(p for p in HERE.glob("bench_*.py") if not wanted or p.stem in wanted)
    for path in mods:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod  # dataclasses look their module up there
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        print(f"\n=== {path.stem} ===", flush=True)
        t0 = time.perf_counter()
        mod.main()
        print(f"--- {path.stem}: {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
