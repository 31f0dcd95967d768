"""The prefix kind's analysis and its "Prefix cache" section of the card, from a run of shared-prefix points on
the virtual server: cold against warm TTFT and ingestion speed, the speed-up with its interval, the server's hit
rate per phase, and eviction when the prefixes outgrow the KV cache; saved as summary.json's ``kinds.prefix``."""

from __future__ import annotations

import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.card.render import render_card
from cardgen.kinds.prefix.analysis import PrefixCache
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.suite import parse_suite

SUITE = """name: prefix
scenarios:
  - kind: prefix
    prefixes: 8
    prefix_tokens: 2048
    suffix_tokens: 64
    output_tokens: 8
    warm_rounds: 2
  - kind: prefix
    prefixes: 40
    prefix_tokens: 4000
    suffix_tokens: 32
    output_tokens: 8
    warm_rounds: 1
"""


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    simulate(parse_suite(SUITE, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"),
             options=DriveOptions(step_jitter=0.05, seed=3), run_dir=run_dir)
    return analyse(load_run(run_dir))


def test_warm_requests_hit_the_cache_and_start_sooner(analysis):
    fits, _ = PrefixCache.model_validate(analysis.summary.kinds["prefix"]).points
    cold, warm = fits.phases
    assert (cold.phase, cold.requests, warm.phase, warm.requests) == ("cold", 8, "warm", 16)
    assert cold.hit_rate == 0 and warm.hit_rate == pytest.approx(2048 / 2112, rel=0.02)
    assert warm.hit_tokens == 16 * 2048
    assert warm.ttft_s.p50 < cold.ttft_s.p50 / 5 and warm.ingest_tok_s.p50 > 5 * cold.ingest_tok_s.p50
    assert fits.speedup == pytest.approx(cold.ttft_s.p50 / warm.ttft_s.p50)
    low, high = fits.speedup_ci
    assert low < fits.speedup < high  # step jitter: a real interval


def test_prefixes_that_outgrow_the_cache_are_evicted(analysis):
    _, pressure = PrefixCache.model_validate(analysis.summary.kinds["prefix"]).points  # 40 x 4000 tokens > the 116,512-token KV cache, visited in a cycle
    assert pressure.phases[1].hit_rate == 0
    assert pressure.speedup == pytest.approx(1.0, rel=0.1)


def test_the_card_has_the_prefix_cache_section(analysis):
    card = render_card(analysis, date="2026-11-22")
    section = card.split("## Prefix cache")[1].split("\n## ")[0]
    assert "8 shared prefixes of 2048 tokens" in section and "| warm | 16 |" in section
    assert "Speed-up of the median TTFT with a cache hit:" in section and "95 % CI" in section
    assert "vllm:prefix\\_cache\\_hits\\_total" in section
