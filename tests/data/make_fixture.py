"""Regenerate the committed fixture run directory ``tests/data/run_small`` (raw files only).

    .venv/bin/python tests/data/make_fixture.py

The run is synthetic (``cardgen.analysis.synthetic``: a simulated continuous-batching server with known prefill
rate, step times and KV capacity), so its truth is known; a real run directory may replace it later. After
regenerating, refresh the golden card: ``CARDGEN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/card``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cardgen.analysis.synthetic import synthetic_run, write_run

FIXTURE = Path(__file__).resolve().parent / "run_small"


def main() -> None:
    data, _ = synthetic_run(model="synthetic/Llama-tiny", seed=0)
    if FIXTURE.exists():
        shutil.rmtree(FIXTURE)
    write_run(FIXTURE, data)
    print(f"wrote {FIXTURE} ({len(data.requests)} requests, {len(data.metrics)} scrapes)")


if __name__ == "__main__":
    main()
