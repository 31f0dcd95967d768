"""Each load worker's path to the server against the quickest other worker's (cardgen.analysis.workers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cardgen.analysis.workers import SLOWER_MIN_S, slower_warnings, worker_paths


def frame(ttft: dict[str, float], *, points: int = 3, per: int = 40, noise: float = 0.002, seed: int = 7) -> pd.DataFrame:
    """``per`` requests of each worker on each point, their TTFT the worker's base plus noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(points):
        for worker, base in ttft.items():
            for _ in range(per):
                rows.append({"scenario": f"p{p}", "worker": worker, "ok": True, "warmup": False,
                             "ttft_s": base + 0.01 * p + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_one_process_has_no_comparison():
    assert worker_paths(frame({"local": 0.02})) == []
    assert worker_paths(pd.DataFrame()) == []


def test_a_worker_behind_a_longer_path_is_slower_by_what_the_path_adds():
    paths = {p.worker: p for p in worker_paths(frame({"w1": 0.02, "w2": 0.02, "w3": 0.07}))}
    assert list(paths) == ["w1", "w2", "w3"]
    assert paths["w3"].slower and paths["w3"].ttft_excess_s == pytest.approx(0.05, abs=0.002)
    assert paths["w3"].compared == 120 and paths["w3"].requests == 120
    assert paths["w3"].ttft_excess_ci_low <= paths["w3"].ttft_excess_s <= paths["w3"].ttft_excess_ci_high
    # against the quickest other worker: the slow one does not make the others look quick
    for name in ("w1", "w2"):
        assert not paths[name].slower and abs(paths[name].ttft_excess_s) < 0.002
    (words,) = slower_warnings(list(paths.values()))
    assert words.startswith("load worker w3 reaches the server by a slower path: its requests' TTFT is 5")


def test_noise_alone_calls_no_worker_slower():
    for seed in range(20):
        assert not any(p.slower for p in worker_paths(frame({"w1": 0.02, "w2": 0.02, "w3": 0.02}, seed=seed)))


def test_a_difference_small_against_the_ttft_is_not_a_slower_path():
    """50 ms more on a 1 s TTFT is under 10 % of it; 3 ms on 20 ms is under the 5 ms floor."""
    assert not any(p.slower for p in worker_paths(frame({"w1": 1.0, "w2": 1.05}, noise=0.001)))
    assert not any(p.slower for p in worker_paths(frame({"w1": 0.02, "w2": 0.02 + SLOWER_MIN_S * 0.6}, noise=0.0005)))


def test_failed_and_warmup_requests_are_counted_not_compared():
    df = frame({"w1": 0.02, "w2": 0.08})
    df.loc[df.index[:10], "ok"] = False
    df.loc[df.index[10:20], "warmup"] = True
    paths = {p.worker: p for p in worker_paths(df)}
    assert paths["w1"].requests == 120 and paths["w1"].compared == 100
    assert paths["w2"].slower
