"""Fixtures for load-engine tests: the project's virtual server with exactly known behaviour (FixedPerf), a
suite writer, and ``cardgen build`` run as a real subprocess (Locust monkey-patches the process it runs in)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cardgen.sim.launch import SimHandle, running_sim

FIXED = {"prefill_tok_s": 200_000.0, "step_overhead_s": 0.010, "per_seq_s": 0.0002, "kv_capacity_tokens": 65536,
         "block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 8192}


def sim_argv(*extra: str, fixed: dict | None = None) -> list[str]:
    return ["test-model", "--perf", "fixed", "--fixed-json", json.dumps(fixed or FIXED), "--max-lifetime-s", "300",
            *extra]


@contextmanager
def sim_server(tmp_path: Path, *extra: str, fixed: dict | None = None) -> Iterator[tuple[SimHandle, Path]]:
    stamps = tmp_path / "stamps.jsonl"
    with running_sim(sim_argv("--stamp-log", str(stamps), *extra, fixed=fixed), log_path=tmp_path / "sim.log") as s:
        yield s, stamps


def read_stamps(path: Path) -> list[dict]:
    """The stamp log's load requests (cardgen's probes before the load, marked ``probe``, left out)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [s for s in (json.loads(line) for line in lines if line.strip()) if not s.get("probe")]


def read_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[..., Path]:
    def write(text: str, name: str = "suite.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def build(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cardgen", "build", *args, "--no-card", "--quiet"],
                          capture_output=True, text=True, timeout=timeout)
