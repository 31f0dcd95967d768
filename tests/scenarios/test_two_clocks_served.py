"""Reasoning, speculative decoding and LoRA adapters, both clocks: the load engine against the real-time virtual
server (over HTTP: reasoning read from ``delta.reasoning`` with usage's count on chat, from a ``<think>`` span
counted by ``/tokenize`` on completions; the adapter sent as the model name; multi-token chunks) and the
virtual-time driver (records built from the same rules) give the same points, the same reasoning counts exactly,
the same adapters, and the same thinking time (TTFA - TTFT, within 5 % in the closed loop: the first token's own time differs by up
to a step or two between the clocks, a request sent in real time waiting for the step under way, and more when
the machine is busy; an all-at-once burst's only bounded, as said at the check). Every draft is accepted (``--spec-acceptance 1``):
each step gives a sequence 3 tokens on both clocks, so the times are comparable request by request; drawn
acceptances are tested in virtual time (``tests/sim/test_served_model.py``), and so is ``--max-loras`` passing a
request over (a closed loop whose adapters queue for one slot locks into a timing-dependent rhythm: its two clocks
need not agree)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from simruns import simulate
from test_two_clocks import FIXED, outcomes

from cardgen.analysis import analyse, load_run
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.launch import running_sim
from cardgen.sim.served import ServedModel
from cardgen.suite import parse_suite

pytestmark = pytest.mark.sockets

SUITE = """name: served
scenarios:
  - kind: closed
    endpoint: chat
    prompt_tokens: [256]
    output_tokens: [64]
    parallel: [4]
    min_requests: 24
    max_requests: 24
    adapters: [a, b]
  - kind: open
    prompt_tokens: 128
    output_tokens: 64
    rates: [inf]
    num_requests: 8
"""
FLAGS = ["--reasoning-share", "0.25", "--spec-tokens", "2", "--spec-acceptance", "1", "--lora-adapters", "a,b",
         "--max-loras", "2"]


def test_both_clocks_agree_on_reasoning_adapters_and_speculation(tmp_path):
    suite = parse_suite(SUITE, source="served")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False))
    served = ServedModel.of_options(reasoning_share=0.25, spec_tokens=2, spec_acceptance=1.0, adapters=("a", "b"),
                                    max_loras=2)
    simulate(suite, SimConfig(model="test-model", perf="fixed", fixed_json=json.dumps(FIXED), served=served),
             options=DriveOptions(), run_dir=tmp_path / "virtual")
    with running_sim(["test-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s", "120",
                      *FLAGS]) as sim:
        real = subprocess.run([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url, "--suite",
                               str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "real"), "--no-card", "--quiet"],
                              capture_output=True, text=True, timeout=120)
        # how late the server wrote any of its tokens, by its own account: a step that ends late is followed by
        # the next at its modelled end (the engine catches up), so a first token written late shortens the
        # thinking measured over HTTP by as much, at most (CI, a busy machine: 27.1 ms against 39.6 ms)
        late_s = sim.get_json("/cardgen/sim/lag")["max"]
    assert real.returncode == 0, real.stderr
    assert outcomes(tmp_path / "real") == outcomes(tmp_path / "virtual")
    real_run, virtual_run = (analyse(load_run(tmp_path / d)).summary for d in ("real", "virtual"))
    assert real_run.reasoning and virtual_run.reasoning
    for r, v in zip(real_run.scenarios, virtual_run.scenarios, strict=True):
        assert r.scenario == v.scenario and r.failed == v.failed == 0
        assert r.reasoning_tokens_mean == v.reasoning_tokens_mean == 16  # 25 % of 64, exactly
        assert r.answer_tokens_mean == v.answer_tokens_mean == 48
        assert r.reasoning_tokens_source == v.reasoning_tokens_source == (
            "usage" if r.endpoint == "chat" else "tokenize")
        thinking = (r.ttfa_s.p50 - r.ttft_s.p50, v.ttfa_s.p50 - v.ttft_s.p50)
        if r.kind == "closed":  # a user's next request leaves after the client's own milliseconds in real time, so
            # its prefill may fall into another's thinking steps (in virtual time it comes at the previous end): within
            # 5 % shorter, at most 15 % longer (5.7 % longer seen once in a fresh-clone make test, within 5 % in the others)
            assert thinking[1] * 0.95 - late_s <= thinking[0] <= thinking[1] * 1.15, (r.scenario, thinking, late_s)
        else:  # all at once: in real time the 8 sends leave over the client's own milliseconds, and each late
            # arrival's prefill lengthens the steps of those already thinking (19 % longer seen on an idle machine);
            # in virtual time they all arrive together. Never shorter (but for the server's own lateness), and not
            # twice as long
            assert thinking[1] * 0.95 - late_s <= thinking[0] <= thinking[1] * 2, (r.scenario, thinking, late_s)
        assert [a.adapter for a in r.per_adapter] == [a.adapter for a in v.per_adapter]
    sent = [[(r["adapter"], r["index"]) for r in map(json.loads, (tmp_path / d / "requests.jsonl").open())
             if r["scenario"].startswith("closed")] for d in ("real", "virtual")]
    assert sorted(sent[0]) == sorted(sent[1]) and {a for a, _ in sent[0]} == {"a", "b"}  # in turn, on both clocks
    assert real_run.scenarios[0].adapters_in_flight == pytest.approx(2, rel=0.1)
    for summary in (real_run, virtual_run):
        spec = summary.speculative
        assert spec.acceptance_rate == 1.0 and spec.draft_tokens == 2 * spec.drafts and spec.per_position == [1, 1]
