"""``cardgen diff`` of structured points (``cardgen.kinds.structured.diff``): each arm compared on its own, never
pooled. Two modelled runs of the same suite, one whose constrained decode steps take 1.5 times a free one's: the
constrained arm's TPOT is slower with an interval, the free arm's is not, and the ratio of the arms says it."""

from __future__ import annotations

import pytest
from simruns import simulate

from cardgen.diff import NO_SIGNIFICANT_CHANGE, SLOWER, diff_runs
from cardgen.diff.compute import RunDiff
from cardgen.diff.format import format_diff
from cardgen.sim.config import SimConfig
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # whole modelled runs

SUITE = """name: structured-diff
endpoint: chat
scenarios:
  - kind: structured
    schemas: [flat]
    prompt_tokens: 128
    output_tokens: 32
    parallel: [1, 4]
    rounds: 8
    modelled_decode_factor: {factor}
"""


@pytest.fixture(scope="module")
def diff(tmp_path_factory) -> RunDiff:
    runs = []
    for factor in (1.0, 1.5):
        run_dir = tmp_path_factory.mktemp(f"run{factor}")
        simulate(parse_suite(SUITE.format(factor=factor), source="x"),
                 SimConfig(model="CodeLlama-7b", gpu="A100-80GB"), run_dir=run_dir)
        runs.append(run_dir)
    return diff_runs(*runs)


def test_each_arm_is_a_figure_of_its_own_and_the_arms_are_never_pooled(diff):
    assert [p.label for p in diff.points] == ["structured · 128 → 32 tokens · 1 parallel",
                                              "structured · 128 → 32 tokens · 4 parallel"]
    for point in diff.points:
        keys = {f.key for f in point.figures}
        assert {"constrained/tpot_s/p50", "free/tpot_s/p50", "constrained/ttft_s/p99", "free/output_tok_s",
                "constrained_over_free/tpot"} <= keys
        assert not keys & {"ttft_s/p50", "tpot_s/p50", "output_tok_s"}  # no figure of both arms at once


def test_the_slower_constrained_decode_is_slower_and_the_free_arm_is_not(diff):
    for point in diff.points:
        figures = {f.key: f for f in point.figures}
        constrained, free = figures["constrained/tpot_s/p50"], figures["free/tpot_s/p50"]
        assert constrained.interval == "bootstrap" and constrained.verdict == SLOWER
        assert constrained.ratio == pytest.approx(1.5, rel=0.1) and constrained.ci_low > 1.2
        assert free.verdict == NO_SIGNIFICANT_CHANGE and free.ratio == pytest.approx(1.0, abs=0.1)
        over = figures["constrained_over_free/tpot"]
        assert over.a == pytest.approx(1.0, abs=0.05) and over.b == pytest.approx(1.5, abs=0.1)
        assert over.interval == "none" and "card gives its interval" in over.note
    text = format_diff(diff)
    assert "constrained TPOT p50" in text and "free TPOT p50" in text
