"""Runs of the virtual server in virtual time for ``cardgen diff``: two of the same server (other seeds, so other
step jitter), one of a server 20 % slower (every step time divided by 0.8, the prefill rate times 0.8), and one of
another suite. Written as raw run directories, as the load stage leaves them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simruns import SyntheticServer, synthetic_run, write_run

DIFF_SUITE = """
name: diff
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 768, 1024, 1536, 2048, 3072, 4000]
    repeats: 3
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1, 10]
    min_requests: 100
  - kind: open
    prompt_tokens: 256
    output_tokens: 32
    rates: [4]
    num_requests: 30
"""
OTHER_SUITE = """
name: other
scenarios:
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [10]
    min_requests: 20
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [32]
    parallel: [4]
    min_requests: 8
"""
FACTOR = 0.8  # the slower server: every speed times this


def slower(server: SyntheticServer, factor: float) -> SyntheticServer:
    """The same server with every speed times ``factor`` (its network unchanged)."""
    return SyntheticServer(prefill_tok_s=server.prefill_tok_s * factor, step_overhead_s=server.step_overhead_s / factor,
                           per_seq_s=server.per_seq_s / factor, kv_capacity_tokens=server.kv_capacity_tokens)


@dataclass(frozen=True)
class DiffRuns:
    base: Path
    same: Path  # the same server, another seed
    slow: Path  # 20 % slower
    other: Path  # the same server, another suite


def make_runs(root: Path) -> DiffRuns:
    server = SyntheticServer()

    def run(name: str, suite: str, s: SyntheticServer, seed: int) -> Path:
        data, _ = synthetic_run(suite=suite, server=s, seed=seed)
        return write_run(root / name, data)

    return DiffRuns(base=run("base", DIFF_SUITE, server, 0), same=run("same", DIFF_SUITE, server, 1),
                    slow=run("slow", DIFF_SUITE, slower(server, FACTOR), 2),
                    other=run("other", OTHER_SUITE, server, 3))
