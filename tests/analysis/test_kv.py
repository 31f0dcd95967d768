from __future__ import annotations

import numpy as np
import pytest
from simruns import SyntheticServer, synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.analysis.kv import block_size_of, declared_kv, resident_tokens
from cardgen.analysis.timeseries import server_timeseries
from cardgen.schemas.records import MetricSample

WAVES_ONLY = """
name: waves
scenarios:
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [4]
    min_requests: 8
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 128
    max_wave: 16
"""


def kv_of(server: SyntheticServer, suite: str = WAVES_ONLY):
    data, truth = synthetic_run(suite=suite, server=server)
    return analyse(data).summary.kv_cache, truth


def sample(t: float = 1.0, **samples) -> MetricSample:
    return MetricSample(t=t, samples={k.replace("__", ":"): v for k, v in samples.items()})


def cache_config(**labels: str) -> list[dict]:
    return [{"labels": labels, "value": 1}]


def test_server_config_vllm_tokens_then_blocks():
    new = sample(vllm__cache_config_info=cache_config(kv_cache_size_tokens="262144", block_size="128",
                                                      num_gpu_blocks="2048"))
    declared = declared_kv([new], engine="vllm", server_extra={})
    assert (declared["tokens"], declared["source"]) == (262144, "vllm:cache_config_info kv_cache_size_tokens")
    assert block_size_of(declared) == 128
    old = sample(vllm__cache_config_info=cache_config(kv_cache_size_tokens="None", block_size="16",
                                                      num_gpu_blocks="7000"))
    assert declared_kv([old], engine="vllm", server_extra={})["tokens"] == 112_000


def test_server_config_is_the_last_scrape_that_says_it_then_the_probe():
    first = sample(1.0, vllm__cache_config_info=cache_config(kv_cache_size_tokens="1000", block_size="16"))
    resized = sample(2.0, vllm__cache_config_info=cache_config(kv_cache_size_tokens="2000", block_size="16"))
    silent = sample(3.0, vllm__num_requests_running=[{"labels": {}, "value": 0}])
    failed = MetricSample(t=4.0, error="timeout")
    probed = {"cache_config": {"kv_cache_size_tokens": "3000", "block_size": "32"}}
    assert declared_kv([first, resized, silent, failed], engine="vllm", server_extra=probed)["tokens"] == 2000
    from_probe = declared_kv([silent, failed], engine="vllm", server_extra=probed)
    assert (from_probe["tokens"], block_size_of(from_probe)) == (3000, 32)
    assert declared_kv([], engine="vllm", server_extra=None) is None


def test_server_config_of_each_engine_comes_from_its_adapter():
    tgi = sample(tgi_batch_max_total_tokens=[{"labels": {}, "value": 32000}])
    assert declared_kv([tgi], engine="tgi", server_extra={}) == {"tokens": 32000,
                                                                 "source": "tgi_batch_max_total_tokens"}
    props = {"props": {"total_slots": 4, "default_generation_settings": {"n_ctx": 4096}}}
    assert declared_kv([], engine="llamacpp", server_extra=props) is None  # a cache per slot, or one shared?
    per_slot = {**props, "process": {"pid": 1, "command": ["llama-server", "-np", "4", "-c", "16384"]}}
    assert declared_kv([], engine="llamacpp", server_extra=per_slot)["tokens"] == 16384
    unified = {**props, "log": {"n_slots": 4, "n_ctx_slot": 4096, "kv_unified": True}}
    assert declared_kv([], engine="llamacpp", server_extra=unified)["tokens"] == 4096
    sglang = sample(sglang__max_total_num_tokens=[{"labels": {}, "value": 471258}])
    page = {"server_info": {"page_size": 16, "max_total_num_tokens": 1}}
    declared = declared_kv([sglang], engine="sglang", server_extra=page)
    assert (declared["tokens"], declared["source"], block_size_of(declared)) == (
        471258, "sglang:max_total_num_tokens", 16)
    assert block_size_of({"tokens": 1, "source": "s", "block_size": 1}) is None  # a page of one token
    # another engine's names, or an engine cardgen does not know, declare nothing
    assert declared_kv([tgi], engine="vllm", server_extra=props) is None
    assert declared_kv([tgi], engine=None, server_extra=props) is None
    assert declared_kv([tgi], engine="some-new-engine", server_extra=props) is None


def test_unknown_engine_reads_no_gauge_but_still_estimates():
    data, _ = synthetic_run(suite=WAVES_ONLY, server=SyntheticServer(kv_capacity_tokens=16384))
    unknown = data.info.model_copy(update={"server": data.info.server.model_copy(update={"engine": "unknown"})})
    ts = server_timeseries(data.metrics, engine="unknown")
    assert len(ts) == len(data.metrics) and ts[["kv_usage", "running", "waiting", "preemptions"]].isna().all().all()
    kv = analyse(type(data)(info=unknown, requests=data.requests, metrics=data.metrics)).summary.kv_cache
    assert [e.method for e in kv.estimates] == ["saturation_probe"]  # from client timing alone
    assert kv.block_size is None


@pytest.mark.parametrize("engine", ["vllm", "vllm-old", "tgi", "llamacpp"])
def test_exposed_config_is_exact(engine):
    kv, truth = kv_of(SyntheticServer(engine=engine, kv_capacity_tokens=16384))
    assert kv.method == "server_config"
    assert kv.tokens == pytest.approx(truth.server.kv_capacity_tokens, rel=0.02)


def test_hidden_config_uses_usage_extrapolation():
    kv, truth = kv_of(SyntheticServer(expose_cache_config=False, kv_capacity_tokens=16384, jitter=0.05,
                                      network_s=0.004))
    assert kv.method == "usage_extrapolation"
    assert kv.block_size is None  # hidden too: resident tokens are not rounded to blocks
    assert kv.tokens == pytest.approx(16384, rel=0.15)
    assert kv.tokens == pytest.approx(16384, rel=0.03)


def test_hidden_config_and_usage_falls_back_to_saturation_probe():
    kv, truth = kv_of(SyntheticServer(expose_cache_config=False, expose_usage=False, kv_capacity_tokens=16384))
    assert kv.method == "saturation_probe"
    assert truth.preemptions > 0
    probe = kv.estimates[0]
    assert probe.low <= 16384 <= probe.high
    assert kv.tokens == pytest.approx(16384, rel=0.15)


def test_tgi_hidden_saturates_by_queueing():
    kv, _ = kv_of(SyntheticServer(engine="tgi", expose_cache_config=False, kv_capacity_tokens=16384))
    assert kv.method == "saturation_probe"
    assert kv.tokens == pytest.approx(16384, rel=0.15)


def test_no_metrics_at_all_still_estimates_from_client_timing():
    data, _ = synthetic_run(suite=WAVES_ONLY, server=SyntheticServer(engine="none", kv_capacity_tokens=16384))
    summary = analyse(data).summary
    kv = summary.kv_cache
    assert kv.method == "saturation_probe"
    assert kv.tokens == pytest.approx(16384, rel=0.15)
    assert any(w["queued"] or w["stalled"] for w in summary.kinds["waves"]["waves"])  # the kind's own result


def test_agreement_is_reported():
    kv, _ = kv_of(SyntheticServer(kv_capacity_tokens=16384))
    assert [e.method for e in kv.estimates] == ["server_config", "usage_extrapolation", "saturation_probe"]
    assert kv.estimates[0].vs_chosen_pct == 0
    others = [abs(e.vs_chosen_pct) for e in kv.estimates[1:]]
    assert kv.agreement_pct == pytest.approx(max(others))
    assert kv.agreement_pct < 15


def test_unsaturated_waves_give_only_a_lower_bound():
    suite = WAVES_ONLY.replace("max_wave: 16", "max_wave: 3")
    summary = analyse(synthetic_run(suite=suite, server=SyntheticServer(
        engine="none", kv_capacity_tokens=65536))[0]).summary
    kv = summary.kv_cache
    assert kv.tokens is None and kv.method is None
    assert kv.lower_bound == 3 * 1152
    assert summary.kv_cache_tokens is None
    assert any("lower bound" in m for m in summary.missing)


def test_queueing_below_full_kv_is_not_taken_for_capacity():
    kv, _ = kv_of(SyntheticServer(expose_cache_config=False, kv_capacity_tokens=65536, max_num_seqs=4))
    assert kv.method == "usage_extrapolation"  # the probe gives nothing: max_num_seqs queued the waves
    assert all(e.method != "saturation_probe" or e.tokens is None for e in kv.estimates)
    assert "something other than the KV cache" in kv.not_run["saturation_probe"]


def test_resident_tokens_interpolates_over_chunks():
    chunks = np.array([10.0, 11.0, 12.0, 13.0, 14.0])
    kw = dict(prompt_tokens=100, output_tokens=9, first_token_at=10.0, chunk_times=chunks)
    assert resident_tokens(9.0, **kw) == 100  # prefill: the prompt only
    assert resident_tokens(10.5, **kw) == 101
    assert resident_tokens(12.0, **kw) == 100 + 1 + 8 * 2 / 4
    assert resident_tokens(14.0, **kw) == 109


@pytest.mark.parametrize(("block", "shuffled"), [(4096, False), (7, False), (7, True)])
def test_usage_ratios_find_the_requests_in_flight_as_a_scan_of_every_request_would(monkeypatch, block, shuffled):
    """Scrapes are taken some at a time (``block``), each looking only at the requests sent within the longest
    request's time before it, every request's arrived chunks counted at all of its scrapes in one search: the same
    requests, in the same order, so the same ratios to the last bit, in the scrapes' order (``shuffled``: not time
    order), as a scan of every request at every scrape (what a long run cannot afford: 80,000 scrapes by 177,000
    requests in the planner's suite)."""
    import math

    import pandas as pd

    from cardgen.analysis import kv
    from cardgen.analysis.kv import MIN_USAGE, round_up, usage_ratios

    monkeypatch.setattr(kv, "SCRAPE_BLOCK", block)

    rng = np.random.default_rng(7)
    n = 400
    sent = np.sort(rng.uniform(0, 100, n))
    rng.shuffle(sent)  # a frame is in the order requests ended, not sent
    dur = rng.uniform(0.5, 8.0, n)
    dur[::50] = 30.0  # a few long ones: the window is the longest's
    first = sent + dur * 0.1
    end = sent + dur
    end[::37] = np.nan  # failed: never in flight
    chunks = [np.linspace(f, e, 16) if math.isfinite(e) else np.empty(0) for f, e in zip(first, end, strict=True)]
    requests = pd.DataFrame({"sent_at": sent, "end_at": end, "first_token_at": first, "prompt_tokens": 256.0,
                             "prompt_tokens_target": 256, "output_tokens": 16.0, "chunk_times": chunks})
    t = np.arange(0.0, 110.0, 0.5)
    if shuffled:
        rng.shuffle(t)
    live = np.isfinite(end)
    running = [int(np.sum(live & (sent <= x) & (x < end))) for x in t]
    usage = rng.uniform(0.3, 0.9, len(t))
    usage[::11] = 0.01  # too coarse
    waiting = np.where(np.arange(len(t)) % 13 == 0, 2.0, 0.0)  # queued: not read
    ts = pd.DataFrame({"t": t, "kv_usage": usage, "waiting": waiting, "running": running})
    got = usage_ratios(requests, ts, block_size=16)

    s, e, f = sent[live], end[live], first[live]  # the scan: every request at every scrape
    c = [times for times, ok in zip(chunks, live, strict=True) if ok]
    want = []
    for x, u, w in zip(t, ts["kv_usage"], waiting, strict=True):
        inflight = np.flatnonzero((s <= x) & (x < e))
        if u < MIN_USAGE or w > 0 or len(inflight) == 0:
            continue
        tokens = np.array([resident_tokens(x, prompt_tokens=256.0, output_tokens=16.0, first_token_at=f[i],
                                           chunk_times=c[i]) for i in inflight])
        want.append(float(np.sum(round_up(tokens, 16))) / u)
    assert len(want) > 130 and got.tolist() == want
