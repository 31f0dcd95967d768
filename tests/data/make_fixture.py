"""Regenerate the committed fixture run directory ``tests/data/run_small`` (raw files only).

    .venv/bin/python tests/data/make_fixture.py

The run is the virtual server's in virtual time, made as ``cardgen build`` makes one
(:func:`cardgen.sim.modelled.modelled_run`): ``cardgen build CodeLlama-7b --gpu A100-80GB`` with the small suite
below, a network of 0.5 ms each way and up to 0.5 ms on each chunk's read, /metrics scraped every 0.5 s. Its
truth is the performance model's (prefill rate, step times, KV capacity); its files are what the load stage
writes. After regenerating, refresh the golden card: ``CARDGEN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/card``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.modelled import modelled_run
from cardgen.suite import parse_suite

FIXTURE = Path(__file__).resolve().parent / "run_small"
MODEL, GPU = "CodeLlama-7b", "A100-80GB"
SUITE = """
name: small
description: every scenario kind, small enough to commit
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 768, 1024, 1536, 2048, 3072, 4000]
    repeats: 2
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1, 4, 10]
    min_requests: 1
    target_ci: 0.05
    max_requests: 120
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [32]
    parallel: [1, 4, 10]
    min_requests: 8
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 32
    max_wave: 12
  - kind: open
    prompt_tokens: 256
    output_tokens: 32
    rates: [4, inf]
    num_requests: 10
  - kind: batch
    prompt_tokens: 128
    output_tokens: 16
    batch_sizes: [1, 2, 4, 8]
    warmups: 1
    runs: 2
"""
OPTIONS = DriveOptions(seed=0, network_s=0.0005, read_jitter_s=0.0005)


def main() -> None:
    if FIXTURE.exists():
        shutil.rmtree(FIXTURE)
    suite = parse_suite(SUITE, source="tests/data/make_fixture.py")
    command = ["cardgen", "build", MODEL, "--gpu", GPU, "--suite", "small.yaml"]
    run = modelled_run(suite, SimConfig(model=MODEL, gpu=GPU), FIXTURE, argv=command, options=OPTIONS)
    size = sum(p.stat().st_size for p in FIXTURE.iterdir())
    print(f"wrote {FIXTURE}: {len(run.drive.records)} requests, {len(run.drive.scrapes)} scrapes, "
          f"{run.drive.seconds:.0f} s of virtual time, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
