"""The prefix cache measured on a real vLLM (CPU build, prefix caching on, as V1 has it by default): a
shared-prefix point through ``cardgen build``, checked against vLLM's own prefix-cache counters."""

from __future__ import annotations

import pytest
from test_engine_e2e import build_against

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.engines import counter, metric_names
from cardgen.kinds.prefix.analysis import PrefixCache

pytestmark = pytest.mark.engine

SUITE = """name: prefix-engine
scenarios:
  - {kind: prefix, name: shared-prefix, prefixes: 6, prefix_tokens: 1024, suffix_tokens: 48, output_tokens: 4,
     warm_rounds: 2}
"""


@pytest.fixture(scope="module")
def prefix_run(vllm_server, tmp_path_factory):
    return build_against(vllm_server, tmp_path_factory, "prefix", SUITE)


def test_vllm_serves_the_warm_prefixes_from_its_cache(prefix_run):
    out, before, after = prefix_run
    analysis = analyse(load_run(out))
    (result,) = PrefixCache.model_validate(analysis.summary.kinds["prefix"]).points
    cold, warm = result.phases
    assert (cold.requests, warm.requests) == (6, 12)
    assert cold.hit_rate is not None and cold.hit_rate < 0.05  # the run's own id starts every prefix
    assert warm.hit_rate is not None and warm.hit_rate > 0.8  # the 1024-token prefix of ~1,080-token prompts
    # the phases' hits are vLLM's own counter, whole
    names = metric_names("vllm")
    hits = counter(after, names["prefix_cache_hits"]) - counter(before, names["prefix_cache_hits"])
    assert cold.hit_tokens + warm.hit_tokens == hits
    assert result.speedup is not None and result.speedup > 1
    card = (out / "README.md").read_text("utf-8")
    print(card.split("## Prefix cache")[1].split("\n## ")[0])  # the figures, for the report (pytest -rP)
    assert "## Prefix cache" in card and "vllm:prefix\\_cache\\_hits\\_total" in card
