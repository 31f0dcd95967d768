"""Decode speed with speculation against without it, as two runs compared by ``cardgen diff`` (issue 22): the same
modelled server (CodeLlama-7b on an A100-80GB, in virtual time) built once plain and once speculating 4 ngram tokens
at 70 % acceptance. The speculating run's decode speed at 10 parallel is significantly faster and the diff says so with
an interval; only the speculating run has an acceptance rate, the configured one."""

from __future__ import annotations

import json

import pytest
from clirun import cardgen

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = """name: spec-diff
scenarios:
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [10]
    min_requests: 60
    max_requests: 60
"""


def test_cardgen_diff_shows_decode_faster_with_speculation_than_without(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    runs = {}
    for name, extra in {"plain": [], "spec": ["--spec-tokens", "4", "--spec-acceptance", "0.7"]}.items():
        runs[name] = tmp_path / name
        built = cardgen("build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "suite.yaml"),
                        "--out", str(runs[name]), "--quiet", *extra)
        assert built.returncode == 0, built.stderr
    spec = json.loads((runs["spec"] / "summary.json").read_text())["speculative"]
    assert spec["acceptance_rate"] == pytest.approx(0.7, rel=0.02)
    assert json.loads((runs["plain"] / "summary.json").read_text())["speculative"] is None

    diff = cardgen("diff", str(runs["plain"]), str(runs["spec"]), "--json")
    assert diff.returncode == 0, diff.stderr
    figures = {h["name"]: h for h in json.loads(diff.stdout)["headlines"]}
    decode = figures["decode_tok_s_at_10_parallel_1024_128"]
    # ngram drafts cost no compute on the roofline: each step turns out 1 + 4 x 0.7 x ... tokens for a little more
    # verify work, so decode is at least 1.5x as fast, and the interval says it is not chance
    assert decode["b"] > 1.5 * decode["a"] and decode["significant"] is True
    assert decode["ci_low"] is not None and decode["ci_low"] > 1.0

    text = cardgen("diff", str(runs["plain"]), str(runs["spec"]))
    assert text.returncode == 0 and "Decode" in text.stdout, text.stdout
