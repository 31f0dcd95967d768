"""Done-when: the real load engine (``cardgen build``, Locust in a subprocess) against the project's virtual
server with exactly known behaviour (FixedPerf), then the card. The analysis must recover the server: prefill
rate within 10 %, KV tokens within 2 % when the cache config is exposed and within 15 % when it is hidden,
generation speed within 5 % of the server's own stamps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import ModelCard

from cardgen.analysis import RunData, analyse, load_run
from cardgen.rundir import CARD_MD, SUMMARY_JSON
from cardgen.sim.launch import running_sim

# the load engine over HTTP against the real-time virtual server, judged against the server's own stamps
pytestmark = pytest.mark.sockets

FIXED = {"prefill_tok_s": 20_000.0, "step_overhead_s": 0.010, "per_seq_s": 0.0002, "kv_capacity_tokens": 12288,
         "block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 8192}
SUITE = """
name: e2e
scenarios:
  - kind: ingest
    min_prompt_tokens: 16
    max_prompt_tokens: 4000
    points: 12
  - kind: closed
    prompt_tokens: 1024
    output_tokens: 128
    parallel: [10]
    min_requests: 20
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 64
    max_wave: 13
    step: 2
"""
HEADLINE = "closed-in1024-out128-p10"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("e2e")
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    stamps = tmp / "stamps.jsonl"
    run = tmp / "run"
    argv = ["test-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s", "300",
            "--stamp-log", str(stamps)]
    with running_sim(argv, log_path=tmp / "sim.log") as sim:
        proc = subprocess.run([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url, "--suite",
                               str(suite), "--out", str(run), "--quiet"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return run, [json.loads(line) for line in stamps.read_text().splitlines() if line.strip()]


def server_medians(run: Path, stamps: list[dict]) -> tuple[float, float]:
    """Median speed from start and decode speed of the headline point, from the server's own stamps."""
    ids = {json.loads(line)["response_id"] for line in (run / "requests.jsonl").read_text().splitlines()
           if json.loads(line)["scenario"] == HEADLINE}
    mine = [s for s in stamps if s["id"] in ids]
    assert len(mine) == len(ids) >= 20
    start = [len(s["times"]) / (s["times"][-1] - s["arrived"]) for s in mine]
    decode = [(len(s["times"]) - 1) / (s["times"][-1] - s["times"][0]) for s in mine]
    return float(np.median(start)), float(np.median(decode))


def test_build_ends_with_a_card_that_recovers_the_server(built):
    run, stamps = built
    summary = json.loads((run / SUMMARY_JSON).read_text())
    head = summary["headline"]
    assert head["prompt_ingestion_tok_s"] == pytest.approx(FIXED["prefill_tok_s"], rel=0.10)
    start, decode = server_medians(run, stamps)
    assert head["generation_tok_s_at_10_parallel_1024_128"] == pytest.approx(start, rel=0.05)
    assert head["decode_tok_s_at_10_parallel_1024_128"] == pytest.approx(decode, rel=0.05)
    assert summary["kv_cache_method"] == "server_config"
    assert head["kv_cache_tokens"] == pytest.approx(FIXED["kv_capacity_tokens"], rel=0.02)
    for estimate in summary["kv_cache"]["estimates"]:  # every method, not only the chosen one
        assert estimate["tokens"] == pytest.approx(FIXED["kv_capacity_tokens"], rel=0.15), estimate
    text = (run / CARD_MD).read_text()
    assert ModelCard(text).data.to_dict()["cardgen"]["headline"]["kv_cache_method"] == "server_config"
    assert all((run / f).is_file() for f in summary["figures"])


def test_hidden_cache_config_is_estimated(built):
    run, _ = built
    data = load_run(run)
    hidden = [m.model_copy(update={"samples": {k: v for k, v in m.samples.items() if k != "vllm:cache_config_info"}})
              for m in data.metrics]  # what --hide-cache-config leaves out of /metrics
    kv = analyse(RunData(info=data.info, requests=data.requests, metrics=hidden)).summary.kv_cache
    assert kv.method == "usage_extrapolation"
    assert kv.tokens == pytest.approx(FIXED["kv_capacity_tokens"], rel=0.15)
    without_usage = [m.model_copy(update={"samples": {k: v for k, v in m.samples.items()
                                                      if k != "vllm:kv_cache_usage_perc"}}) for m in hidden]
    kv = analyse(RunData(info=data.info, requests=data.requests, metrics=without_usage)).summary.kv_cache
    assert kv.method == "saturation_probe"
    assert kv.tokens == pytest.approx(FIXED["kv_capacity_tokens"], rel=0.15)


def test_server_vs_client_against_the_virtual_server(built):
    """The virtual server publishes vLLM's histograms from its modelled times: both sides count the same first
    tokens, ends and token gaps, and the client sees each token after the server made it. The scrapes are live:
    at a window's edge a token in flight (made before a scrape, received after it) counts on one side only, so
    counts may differ by the streams in flight then (at most the largest wave, 13)."""
    run, _ = built
    summary = json.loads((run / SUMMARY_JSON).read_text())
    v = summary["server_vs_client"]
    assert v["available"], v["reason"]
    whole = {c["metric"]: c for c in v["run"]["latencies"]}
    assert 0 < v["run"]["requests"] <= summary["requests_total"]
    for metric, slack in (("ttft", 2), ("e2e", 2), ("itl", 13)):
        c = whole[metric]
        assert c["client_count"] > 0 and abs(c["server_count"] - c["client_count"]) <= slack, (metric, c)
    # the client's TTFT and end lie after the server's by the loopback and the client's own work: within 50 ms
    # beyond the lateness the load generator measured of its own event loop in this run (its loop lag's p95)
    own_lag_s = load_run(run).info.loadgen.loop_lag_p95_s or 0.0
    assert 0 <= whole["ttft"]["diff_mean_s"] < 0.05 + own_lag_s and 0 <= whole["e2e"]["diff_mean_s"] < 0.05 + own_lag_s
    assert abs(whole["itl"]["diff_mean_s"]) < 0.005
    tokens = {t["tokens"]: t for t in v["run"]["tokens"]}
    assert abs(tokens["output"]["diff"]) <= 13 and abs(tokens["prompt"]["diff"]) <= 2 * 4000
    assert tokens["output"]["server_tokens"] > 1000
    (point,) = [p for p in v["points"] if p["scope"] == HEADLINE]
    ttft = {c["metric"]: c for c in point["latencies"]}["ttft"]
    assert ttft["client_count"] >= 20 and abs(ttft["server_count"] - ttft["client_count"]) <= 2
    text = (run / CARD_MD).read_text()
    assert "## Server vs client" in text and "| TTFT | mean |" in text
