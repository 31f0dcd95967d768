"""The figures of a long run's pooled chunk gaps without the pooled array: :func:`describe_gaps` gives what
:func:`cardgen.analysis.stats.describe` gives of every gap between consecutive text chunks of some requests, to
the last bit, reading them a block at a time (the planner's suite pools 22.5 million gaps: 180 MB as one array).

- the mean: numpy sums a contiguous array pairwise (halves cut at a multiple of 8, to blocks numpy sums itself);
  the same halves are summed here, each block as numpy sums it, so the sum is numpy's;
- min and max: block by block;
- the percentiles (numpy's ``linear`` method) and the bootstrap interval of the median need some order statistics
  only: their ranks follow from the count alone (the bootstrap draws ranks from a seeded generator), and each is
  found by the bits of the values (a float's bits, turned so that they order as the floats do): a histogram of the
  top 20 bits places each rank in a bin, a bin too full is split by its next bits, and the bins holding a rank are
  gathered and sorted.

A gap that is not finite (which ``describe`` leaves out, moving every value after it) sends the pool to the plain
way: the pooled array, described.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
from numpy.lib import _function_base_impl

from cardgen.analysis.stats import PERCENTILES, _median_ci_of_sorted, describe
from cardgen.schemas.summary import Distribution

# numpy's own steps of np.percentile's linear method, given the order statistics it would take from the sorted
# array (tests/analysis/test_pooled.py holds them to np.percentile: a numpy that changes them fails there)
_NUMPY: dict[str, Any] = vars(_function_base_impl)
_LINEAR = _NUMPY["_QuantileMethods"]["linear"]
_get_indexes, _get_gamma, _lerp = _NUMPY["_get_indexes"], _NUMPY["_get_gamma"], _NUMPY["_lerp"]

POOL_LIMIT = 1 << 22  # gaps above which they are described a block at a time (4 Mi gaps: 32 MB as one array)
BLOCK = 1 << 20  # gaps made into an array at a time
GATHER = 1 << 21  # a bin holding more values than this is split by its next bits before it is gathered
_SIGN = np.uint64(1 << 63)
_LEVELS = (44, 24, 4, 0)  # the lowest bit of each level's histogram: 20, 20, 20 and 4 bits of a value's key


def describe_gaps(times: Sequence[np.ndarray]) -> Distribution:
    """``describe`` of every gap between consecutive chunks of each of ``times`` (each request's chunk times, at
    least two; in order), pooled in that order."""
    pool = GapPool(times)
    if pool.n <= POOL_LIMIT:
        return describe(pool.block(0, pool.n), own=True)
    total, low, high, finite = pool.scan()
    if not finite:
        return describe(pool.block(0, pool.n), own=True)
    n = pool.n
    drawn = _Ranks(n)
    _median_ci_of_sorted(drawn)  # type: ignore[arg-type]  # the ranks the bootstrap reads (from the count alone)
    steps = _Steps(n, PERCENTILES)
    ranks = np.unique(np.concatenate([steps.ranks, *drawn.asked]))
    ordered = _Ordered(n, dict(zip(ranks.tolist(), pool.order_statistics(ranks).tolist(), strict=True)))
    pct = steps.percentiles(ordered)
    interval = _median_ci_of_sorted(ordered)  # type: ignore[arg-type]  # read as the sorted array it stands for
    return Distribution(
        n=n, mean=float(total / n), min=low, max=high,
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        p50_ci_low=interval[0] if interval else None, p50_ci_high=interval[1] if interval else None,
    )


class _Steps:
    """np.percentile's steps (linear method) for ``n`` values: the ranks it reads, and its figures from the values
    there."""

    def __init__(self, n: int, percentiles: Sequence[float]) -> None:
        self.n = n
        self.virtual = np.asanyarray(_LINEAR["get_virtual_index"](n, np.true_divide(percentiles, 100)))
        self.previous, self.following = _get_indexes(np.empty(0), self.virtual, n)
        self.ranks = np.concatenate([self.previous % n, self.following % n])

    def percentiles(self, ordered: _Ordered) -> np.ndarray:
        gamma = _get_gamma(self.virtual, self.previous, _LINEAR).reshape(self.virtual.shape)
        out: np.ndarray = _lerp(ordered[self.previous % self.n], ordered[self.following % self.n], gamma)
        return out


class _Ranks:
    """A sorted array of ``n`` values as the bootstrap reads it, recording the ranks it reads (it gets zeros)."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, list[np.ndarray]()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, ranks: np.ndarray) -> np.ndarray:
        self.asked.append(np.asarray(ranks, dtype=np.int64).ravel())
        return np.zeros(np.shape(ranks))


class _Ordered:
    """A sorted array of ``n`` values as far as its order statistics at some ranks (``values``) go."""

    def __init__(self, n: int, values: dict[int, float]) -> None:
        self.n, self.values = n, values

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, ranks: np.ndarray) -> np.ndarray:
        ranks = np.asarray(ranks)
        return np.array([self.values[int(r)] for r in ranks.ravel()], dtype=float).reshape(ranks.shape)


def _keys(values: np.ndarray) -> np.ndarray:
    """Each float's bits as an unsigned integer that orders as the floats do (negatives' bits turned over)."""
    bits = values.view(np.uint64)
    return np.where(bits >= _SIGN, ~bits, bits | _SIGN)


def _value_of(key: int) -> float:
    """The float whose key (:func:`_keys`) is ``key``."""
    bits = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


class GapPool:
    """Gaps between chunks, pooled in order, never all held: any run of them made into an array on demand. Each
    source is a request's chunk times (its gaps are their differences) or, where ``diffs`` says it is not, gaps
    already cut out."""

    def __init__(self, sources: Sequence[np.ndarray], diffs: Sequence[bool] | None = None) -> None:
        self.times = sources
        self.diffs = [True] * len(sources) if diffs is None else list(diffs)
        flags = np.array(self.diffs, dtype=bool)
        self.sizes = np.fromiter(map(len, sources), dtype=np.int64, count=len(sources))  # chunk times or gaps
        lengths = np.maximum(self.sizes - flags, 0)  # each source's gaps
        self.ends = np.cumsum(lengths, dtype=np.int64) if len(lengths) else np.zeros(0, np.int64)
        self.n = int(self.ends[-1]) if len(self.ends) else 0
        # where the run of sources of one kind (chunk times, or kept gaps) that each is in ends: a block's gaps
        # are made a run at a time
        edges = np.concatenate([[0], np.flatnonzero(flags[1:] != flags[:-1]) + 1, [len(sources)]]).astype(np.int64)
        self._run_ends = np.repeat(edges[1:], np.diff(edges))

    def percentiles(self, percentiles: Sequence[float]) -> np.ndarray:
        """``np.percentile`` of the pooled gaps, the same figures (a long pool: a block at a time)."""
        steps = _Steps(self.n, percentiles)
        ranks = np.unique(steps.ranks)
        # a gap that is not finite (seen on the first pass) sends the pool the plain way
        ordered = self.order_statistics(ranks, finite=True) if self.n > POOL_LIMIT else None
        if ordered is None:
            out: np.ndarray = np.percentile(self.block(0, self.n), percentiles, overwrite_input=True)
            return out
        return steps.percentiles(_Ordered(self.n, dict(zip(ranks.tolist(), ordered.tolist(), strict=True))))

    def block(self, a: int, b: int) -> np.ndarray:
        """Gaps ``a`` to ``b`` (not included), each as :func:`cardgen.outcome.chunk_gaps_s` computes it (the same
        subtraction, a run of sources at a time: their chunk times joined, the steps from one source to the next
        left out)."""
        if b <= a:
            return np.empty(0)
        i = int(np.searchsorted(self.ends, a, side="right"))
        last = int(np.searchsorted(self.ends, b - 1, side="right"))  # the source holding gap b - 1
        pieces = []
        k = i
        while k <= last:
            end = min(int(self._run_ends[k]), last + 1)
            pieces.append(self._gaps(k, end))
            k = end
        gaps = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        first = int(self.ends[i - 1]) if i else 0  # the gap source i starts at
        out: np.ndarray = gaps[a - first:b - first]
        return out

    def _gaps(self, k: int, end: int) -> np.ndarray:
        """Every gap of sources ``k`` to ``end`` (not included), all of one kind."""
        one = end == k + 1
        joined = np.asarray(self.times[k], dtype=float) if one else np.concatenate(self.times[k:end]).astype(
            float, copy=False)
        if not self.diffs[k]:
            return joined.copy() if one else joined
        steps: np.ndarray = np.subtract(joined[1:], joined[:-1])
        if one:
            return steps
        across = np.cumsum(self.sizes[k:end - 1]) - 1  # the steps from one source's last time to the next's first
        return np.delete(steps, across[(across >= 0) & (across < len(steps))])

    def blocks(self) -> list[tuple[int, int]]:
        return [(a, min(a + BLOCK, self.n)) for a in range(0, self.n, BLOCK)]

    def scan(self) -> tuple[float, float, float, bool]:
        """The gaps' sum as numpy adds them, their min and max, and whether all are finite (one pass)."""
        seen = [np.inf, -np.inf, True]
        total = self._sum(0, self.n, seen)
        return total, float(seen[0]), float(seen[1]), bool(seen[2])

    def _sum(self, a: int, n: int, seen: list[Any]) -> float:
        """Gaps ``a`` to ``a + n`` summed as numpy's pairwise summation sums them in one array (``seen``: the
        lowest and highest so far, and whether all were finite, updated)."""
        if n <= BLOCK:
            x = self.block(a, a + n)
            if n:
                seen[0], seen[1] = min(seen[0], float(x.min())), max(seen[1], float(x.max()))
                seen[2] = seen[2] and bool(np.isfinite(x).all())
            return float(np.add.reduce(x))
        half = n // 2
        half -= half % 8
        return self._sum(a, half, seen) + self._sum(a + half, n - half, seen)

    @overload
    def order_statistics(self, ranks: np.ndarray) -> np.ndarray: ...

    @overload
    def order_statistics(self, ranks: np.ndarray, *, finite: bool) -> np.ndarray | None: ...

    def order_statistics(self, ranks: np.ndarray, *, finite: bool = False) -> np.ndarray | None:
        """The gaps at ``ranks`` (sorted, unique) of their sorted order (``finite``: None if a gap is not finite,
        seen on the first pass)."""
        # each group: the values whose key's bits above ``shift`` are ``prefix``, and the ranks among them wanted
        groups: list[tuple[int, int, list[tuple[int, int]]]] = [(64, 0, [(int(r), int(r)) for r in ranks])]
        found: dict[int, float] = {}
        gather: list[tuple[int, int, list[tuple[int, int]]]] = []
        while groups:
            split = []
            counts = self._histograms(groups, finite=finite)
            if counts is None:
                return None
            finite = False  # seen on the first pass
            for (shift, prefix, wanted), hist in zip(groups, counts, strict=True):
                low_bit = next(bit for bit in _LEVELS if bit < shift)
                below = np.concatenate([[0], np.cumsum(hist)])
                by_bin: dict[int, list[tuple[int, int]]] = {}
                for rank, local in wanted:
                    b = int(np.searchsorted(below, local, side="right")) - 1
                    by_bin.setdefault(b, []).append((rank, local - int(below[b])))
                for b, inside in by_bin.items():
                    key_prefix = (prefix << (shift - low_bit)) | b if shift < 64 else b
                    if low_bit == 0:  # one key: one value
                        found.update((rank, _value_of(key_prefix)) for rank, _ in inside)
                    elif hist[b] > GATHER:
                        split.append((low_bit, key_prefix, inside))
                    else:
                        gather.append((low_bit, key_prefix, inside))
            groups = split
        if gather:
            kept: list[list[np.ndarray]] = [[] for _ in gather]
            for a, b in self.blocks():
                x = self.block(a, b)
                keys = _keys(x)
                for j, (shift, prefix, _) in enumerate(gather):
                    kept[j].append(x[(keys >> np.uint64(shift)) == np.uint64(prefix)])
            for (_, _, inside), pieces in zip(gather, kept, strict=True):
                values = np.sort(np.concatenate(pieces))
                found.update((rank, float(values[local])) for rank, local in inside)
        return np.array([found[int(r)] for r in ranks], dtype=float)

    def _histograms(self, groups: list[tuple[int, int, list[tuple[int, int]]]], *,
                    finite: bool = False) -> list[np.ndarray] | None:
        """For each group, how many of its values have each value of the next level's bits (``finite``: None if
        a value is not finite)."""
        widths = [shift - next(bit for bit in _LEVELS if bit < shift) for shift, _, _ in groups]
        out = [np.zeros(1 << w, dtype=np.int64) for w in widths]
        for a, b in self.blocks():
            x = self.block(a, b)
            if finite and not np.isfinite(x).all():
                return None
            keys = _keys(x)
            for j, (shift, prefix, _) in enumerate(groups):
                low_bit = shift - widths[j]
                mine = keys if shift == 64 else keys[(keys >> np.uint64(shift)) == np.uint64(prefix)]
                bins = (mine >> np.uint64(low_bit)) & np.uint64((1 << widths[j]) - 1)
                out[j] += np.bincount(bins.astype(np.int64), minlength=1 << widths[j])
        return out
