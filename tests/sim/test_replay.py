"""Trace replay in virtual time, in process: every request leaves at the trace's own offset (divided by the
speed-up), on one process or split over several; a Mooncake trace's shared blocks reach the virtual server as the
load engine's prompt texts share them (the prefix cache finds them); the analysis cuts the replay into windows and
the card draws it as a timeline."""

from __future__ import annotations

import os

import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import RunData
from cardgen.card.render import render_card
from cardgen.datasets import resolve, shared_blocks
from cardgen.figures.names import replay_figure_name
from cardgen.figures.render import build_figures
from cardgen.points import expand
from cardgen.sim import tokenizer
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.suite import parse_suite
from cardgen.traces import read_trace

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

CONFIG = SimConfig(model="CodeLlama-7b", gpu="A100-80GB")


def _suite(entry: str):
    return parse_suite(f"name: replay\nscenarios:\n  - {entry}\n", source="test suite")


def _hits(run) -> tuple[float, float]:
    last = run.drive.scrapes[-1]
    return last.value("vllm:prefix_cache_hits_total") or 0.0, last.value("vllm:prefix_cache_queries_total") or 0.0


@pytest.mark.parametrize("sample", ["mooncake-sample", "azure-sample", "burstgpt-sample"])
@pytest.mark.parametrize("processes", [1, 2])
def test_each_sample_leaves_at_its_own_offsets(sample, processes):
    run = simulate(_suite(f"{{kind: open, name: prod, dataset: {sample}, speedup: 4, max_requests: 120}}"),
                   CONFIG, options=DriveOptions(processes=processes))
    (point,) = run.drive.points
    records = run.drive.records
    trace = read_trace(sample).requests[:120]
    assert point.name == f"prod-{sample}-x4" and len(records) == 120 and not any(r.error for r in records)
    assert sorted(r.item for r in records) == list(range(120))
    for r in records:
        assert r.scheduled_at - point.started_unix == pytest.approx(trace[r.item].offset_s / 4, abs=1e-6)
        assert r.sent_at == r.scheduled_at  # no lag in virtual time
        assert r.output_tokens == trace[r.item].output_tokens
        assert r.prompt_tokens == pytest.approx(trace[r.item].input_tokens, rel=0.02, abs=12)
    assert len({r.worker for r in records}) == processes


def test_a_mooncake_traces_shared_blocks_hit_the_prefix_cache_and_the_same_traffic_without_them_does_not():
    moon = simulate(_suite("{kind: open, dataset: mooncake-sample, speedup: 8}"), CONFIG)
    azure = simulate(_suite("{kind: open, dataset: azure-sample, speedup: 8}"), CONFIG)
    hits, queries = _hits(moon)
    assert hits / queries > 0.4
    hits, queries = _hits(azure)
    assert hits / queries < 0.02


def test_both_interpreters_share_the_same_blocks():
    """The load engine's prompt texts (cardgen.prompts.trace_templates) start with the same text exactly where the
    virtual driver's requests start with the same block hashes: the blocks the point lists."""
    (point,) = expand(_suite("{kind: open, dataset: mooncake-sample, max_requests: 60}"))
    (resolved,), texts = resolve([point], counter=lambda _: tokenizer.count_text, tag=7)
    prompts = texts[resolved.text_key()]
    trace = read_trace("mooncake-sample").requests
    for i in range(60):
        assert resolved.params.blocks[i] == shared_blocks(trace[i].input_tokens, trace[i].hash_ids, 512)
    pairs = 0
    for i in range(60):
        for j in range(i + 1, 60):
            a, b = resolved.params.blocks[i], resolved.params.blocks[j]
            common = len(os.path.commonprefix([a, b]))
            text = os.path.commonprefix([prompts[i], prompts[j]])
            if common:
                pairs += 1
                assert tokenizer.count_text(text) >= common * 512 - 2
            assert tokenizer.count_text(text) < (common + 1) * 512  # nothing shared past the shared blocks
    assert pairs > 100


def test_the_replay_is_cut_into_windows_and_drawn_as_a_timeline():
    run = simulate(_suite("{kind: open, name: prod, dataset: mooncake-sample, speedup: 2}"), CONFIG)
    analysis = analyse(RunData(info=run.info, requests=run.drive.records, metrics=run.drive.scrapes))
    (replay,) = analysis.summary.replays
    assert (replay.scenario, replay.dataset, replay.speedup, replay.requests) == (
        "prod-mooncake-sample-x2", "mooncake-sample", 2.0, 240)
    assert replay.send_lag_s.max == 0 and replay.late_sends == 0
    assert sum(w.sent for w in replay.windows) == 240 and len(replay.windows) <= 30
    assert replay.window_s * len(replay.windows) >= replay.duration_s
    good = [r for r in run.drive.records if r.first_token_at - r.sent_at <= 2.0
            and (r.end_at - r.first_token_at) / (r.output_tokens - 1) <= 0.1]
    assert replay.slo_attainment == pytest.approx(len(good) / 240)
    assert replay.prefix_cache_hit_rate > 0.4
    assert max(w.kv_usage_max for w in replay.windows) > 0.1 and max(w.waiting_max for w in replay.windows) >= 1
    tokens = sum(w.output_tok_s * replay.window_s for w in replay.windows)
    assert tokens == pytest.approx(sum(r.output_tokens for r in run.drive.records))
    assert "replay-prod-mooncake-sample-x2" in analysis.tables
    assert replay_figure_name(replay.scenario) in build_figures(analysis)
    (scenario,) = [s for s in analysis.summary.scenarios if s.scenario == replay.scenario]
    assert scenario.replay and scenario.rate_label == "trace"
    analysis.summary.figures = [f"figures/{replay_figure_name(replay.scenario)}"]
    card = render_card(analysis, date="2026-11-25")
    assert "## Trace replay" in card and "### prod-mooncake-sample-x2" in card
    assert "240 requests of mooncake-sample sent at the trace's own times, 2× faster\n(over" in card
    assert f"figures/{replay_figure_name(replay.scenario)}" in card and "| Window (s) | Sent |" in card
