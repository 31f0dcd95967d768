"""A long run's pooled chunk gaps described a block at a time (:func:`cardgen.analysis.pooled.describe_gaps`):
the same figures, to the last bit, as describing the pooled array, for pools of many shapes (ties, a value
repeated a million times, negative gaps, a bin too full to gather), with blocks, bins and the limit made small
so that every path is taken; and numpy's percentile steps as np.percentile takes them."""

from __future__ import annotations

import numpy as np
import pytest

from cardgen.analysis import pooled
from cardgen.analysis.pooled import describe_gaps
from cardgen.analysis.stats import PERCENTILES, describe


def requests(rng: np.random.Generator, n: int, kind: str) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        chunks = int(rng.integers(2, 40))
        if kind == "jitter":
            steps = rng.lognormal(-4.5, 0.3, chunks - 1)
        elif kind == "ties":
            steps = rng.choice([0.011, 0.0112, 0.0125, 0.2], chunks - 1)
        elif kind == "same":
            steps = np.full(chunks - 1, 0.0113)
        else:  # out of order now and then
            steps = rng.normal(0.01, 0.01, chunks - 1)
        out.append(1_796_000_000.0 + rng.uniform(0, 1000) + np.concatenate([[0.0], np.cumsum(steps)]))
    return out


@pytest.mark.parametrize("kind", ["jitter", "ties", "same", "signed"])
@pytest.mark.parametrize("block, gather", [(64, 8), (1000, 100), (1 << 20, 1 << 21)])
def test_described_a_block_at_a_time_as_the_pooled_array(monkeypatch, kind, block, gather):
    monkeypatch.setattr(pooled, "POOL_LIMIT", 0)
    monkeypatch.setattr(pooled, "BLOCK", block)
    monkeypatch.setattr(pooled, "GATHER", gather)
    times = requests(np.random.default_rng(len(kind) + block), 700, kind)
    whole = np.concatenate([np.diff(t) for t in times])
    assert describe_gaps(times) == describe(whole.copy(), own=True)


def test_a_pool_within_the_limit_is_described_whole(monkeypatch):
    times = requests(np.random.default_rng(3), 50, "jitter")
    assert describe_gaps(times) == describe(np.concatenate([np.diff(t) for t in times]))


def test_a_gap_that_is_not_finite_sends_the_pool_the_plain_way(monkeypatch):
    monkeypatch.setattr(pooled, "POOL_LIMIT", 0)
    monkeypatch.setattr(pooled, "BLOCK", 100)
    times = requests(np.random.default_rng(4), 200, "jitter")
    times[7] = np.array([times[7][0], np.inf, np.inf])
    whole = np.concatenate([np.diff(t) for t in times])
    assert describe_gaps(times) == describe(whole)


def test_the_sum_is_numpys_pairwise_sum(monkeypatch):
    x = np.random.default_rng(5).lognormal(-4, 3, 3_000_001)  # so wide that the order of additions shows
    monkeypatch.setattr(pooled, "BLOCK", 5000)
    pool = pooled.GapPool([np.zeros(len(x) + 1)])
    pool.block = lambda a, b: x[a:b]  # type: ignore[method-assign]  # these gaps, as they are
    total = float(np.add.reduce(x))
    assert pool.scan()[0] == total and float(x.mean()) == total / pool.n
    sequential = 0.0
    for a in range(0, len(x), 8192):
        sequential += float(np.add.reduce(x[a:a + 8192]))
    assert sequential != total  # the test can tell another order of additions


@pytest.mark.parametrize("n", [2, 3, 7, 8, 100, 1001, 65_536, 100_003])
def test_numpys_percentile_steps_are_np_percentile(n):
    x = np.sort(np.random.default_rng(n).lognormal(-4, 1, n))
    quantiles = np.true_divide(PERCENTILES, 100)
    virtual = np.asanyarray(pooled._LINEAR["get_virtual_index"](n, quantiles))
    previous, following = pooled._get_indexes(np.empty(0), virtual, n)
    gamma = pooled._get_gamma(virtual, previous, pooled._LINEAR).reshape(virtual.shape)
    got = pooled._lerp(x[previous % n], x[following % n], gamma)
    assert np.array_equal(got, np.percentile(x, PERCENTILES))


@pytest.mark.parametrize("kind", ["jitter", "ties", "signed"])
def test_a_pool_of_chunk_times_and_kept_gaps_has_np_percentiles(monkeypatch, kind):
    """The cross-check's window: requests wholly inside it by their chunk times, the others by the gaps they keep
    (cut out: no differences taken again), pooled in order."""
    monkeypatch.setattr(pooled, "POOL_LIMIT", 0)
    monkeypatch.setattr(pooled, "BLOCK", 97)
    monkeypatch.setattr(pooled, "GATHER", 16)
    rng = np.random.default_rng(11)
    times = requests(rng, 300, kind)
    diffs = [bool(rng.random() < 0.8) for _ in times]
    sources = [t if d else np.diff(t)[::2] for t, d in zip(times, diffs, strict=True)]
    whole = np.concatenate([np.diff(s) if d else s for s, d in zip(sources, diffs, strict=True)])
    pool = pooled.GapPool(sources, diffs)
    assert pool.n == len(whole) and np.array_equal(pool.block(0, pool.n), whole)
    assert np.array_equal(pool.percentiles([50, 90]), np.percentile(whole, [50, 90]))


def test_any_block_is_the_pooled_arrays_slice():
    """A block is made a run of sources at a time (chunk times joined, the steps from one source to the next left
    out): any block of a pool of both kinds, sources of one or no values among them, is that slice of the pooled
    gaps, to the bit, and is the block's own array."""
    rng = np.random.default_rng(5)
    sources, diffs = [], []
    for _ in range(400):
        size = int(rng.choice([0, 1, 2, 3, 17, 60]))
        diff = bool(rng.random() < 0.7)
        values = 1_796_000_000.0 + np.cumsum(rng.lognormal(-4.5, 0.5, size)) if diff else rng.normal(0.01, 0.01, size)
        sources.append(values)
        diffs.append(diff)
    whole = np.concatenate([np.diff(s) if d else s for s, d in zip(sources, diffs, strict=True)])
    pool = pooled.GapPool(sources, diffs)
    assert pool.n == len(whole)
    cuts = sorted({0, pool.n, *rng.integers(0, pool.n, 60).tolist()})
    for a in cuts:
        for b in (a, a + 1, a + 37, pool.n):
            b = min(b, pool.n)
            got = pool.block(a, b)
            assert np.array_equal(got, whole[a:b])
            got[:] = -1.0  # its own: writing it changes no source
    assert np.array_equal(pool.block(0, pool.n), whole)
