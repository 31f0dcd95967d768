"""The virtual server's prefix cache: cached blocks are not recomputed, are shared, stay cached once free, are
evicted least recently used under pressure, and are counted as vLLM counts them."""

from __future__ import annotations

from cardgen.sim.perf import FixedPerf
from cardgen.sim.scheduler import Scheduler, Seq, block_hashes


def perf(**kw: float) -> FixedPerf:
    base = {"prefill_tok_s": 10_000.0, "step_overhead_s": 0.01, "per_seq_s": 0.001, "block_size": 16}
    return FixedPerf(**{**base, **kw})  # type: ignore[arg-type]


def check(s: Scheduler) -> None:
    """Blocks are conserved: every block is a running sequence's own, a cached block some sequence holds, or
    free (a free one may still be cached); sequences hold what their KV needs."""
    held_cached = sum(1 for ref in s.cache.values() if ref > 0)
    assert sum(q.blocks for q in s.running) + held_cached == s.used_blocks
    assert s.evictable == sum(1 for ref in s.cache.values() if ref == 0) <= s.free_blocks
    for q in s.running:
        assert q.blocks + len(q.pinned) == s.blocks_for(q.computed)


def prompt(prefix: int, unique: int, *, shared: int = 64, own: int = 20) -> list[int]:
    return [prefix * 1000 + j for j in range(shared)] + [10**6 + unique * 1000 + j for j in range(own)]


def serve(s: Scheduler, ids: list[int], out: int = 4) -> Seq:
    """Run one request alone to its end; its TTFT is the first step's duration."""
    seq = s.add(Seq(len(ids), out, block_hashes=block_hashes(ids, s.block_size)))
    t = 0.0
    while s.has_work:
        step = s.next_step(t)
        check(s)
        s.finish_step(step)
        check(s)
        t = step.end_s
    return seq


def test_block_hashes_chain_over_full_blocks():
    a, b = block_hashes(list(range(40)), 16), block_hashes(list(range(32)) + [7] * 8, 16)
    assert len(a) == 2 and a == b  # the 8 tokens of a third, partial block are not hashed
    assert block_hashes([99] + list(range(1, 40)), 16)[1] != a[1]  # a block's hash covers everything before it


def test_a_cached_prefix_is_not_recomputed_and_is_counted():
    s = Scheduler(perf(kv_capacity_tokens=16 * 64))
    cold = serve(s, prompt(1, 1))
    warm = serve(s, prompt(1, 2))
    other = serve(s, prompt(2, 3))
    assert (cold.cached_tokens, warm.cached_tokens, other.cached_tokens) == (0, 64, 0)
    assert warm.first_token_s - warm.arrival_s < cold.first_token_s - cold.arrival_s
    assert s.prefix_queries == 3 * 84 and s.prefix_hits == 64


def test_one_token_is_always_computed():
    s = Scheduler(perf(kv_capacity_tokens=16 * 64))
    ids = list(range(64))
    serve(s, ids)
    again = serve(s, ids)
    assert again.cached_tokens == 48  # 4 full blocks cached, the last recomputed: one token at least


def test_running_sequences_share_cached_blocks():
    s = Scheduler(perf(kv_capacity_tokens=16 * 64))
    serve(s, prompt(1, 1))
    a = s.add(Seq(84, 8, block_hashes=block_hashes(prompt(1, 2), 16)))
    b = s.add(Seq(84, 8, block_hashes=block_hashes(prompt(1, 3), 16)))
    step = s.next_step(0.0)
    check(s)
    assert a.pinned[:4] == b.pinned[:4] and s.cache[a.pinned[0]] == 2
    assert s.used_blocks == 4 + 2 * 2  # the prefix's 4 blocks once, each suffix's 2 blocks
    s.finish_step(step)


def test_cached_blocks_are_evicted_least_recently_used_under_pressure():
    s = Scheduler(perf(kv_capacity_tokens=16 * 12))  # 12 blocks: room for two prefixes of 4 blocks
    for p in (1, 2, 3):
        serve(s, prompt(p, p))
    assert s.cache_evictions > 0
    assert serve(s, prompt(3, 9)).cached_tokens == 64  # the latest prefix is still cached
    assert serve(s, prompt(1, 9)).cached_tokens == 0  # the oldest was evicted
    assert s.kv_usage == 0  # cached blocks nobody holds count as free, as vLLM's usage counts them


def test_without_prefix_caching_nothing_is_cached():
    s = Scheduler(perf(kv_capacity_tokens=16 * 64), prefix_caching=False)
    serve(s, prompt(1, 1))
    assert serve(s, prompt(1, 2)).cached_tokens == 0 and s.prefix_queries == 0


def test_the_virtual_server_exports_vllms_prefix_cache_counters():
    from cardgen.engines import counter, metric_names
    from cardgen.sim.metrics import SimMetrics

    s = Scheduler(perf(kv_capacity_tokens=16 * 64))
    serve(s, prompt(1, 1))
    serve(s, prompt(1, 2))
    text = SimMetrics(model_name="m", cache_config=None).render(s)
    names = metric_names("cardgen-sim")
    assert counter(text, names["prefix_cache_queries"]) == 168
    assert counter(text, names["prefix_cache_hits"]) == 64
