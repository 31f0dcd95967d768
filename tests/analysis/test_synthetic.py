from __future__ import annotations

import pytest

from cardgen.analysis.synthetic import SyntheticServer, synthetic_run


def test_same_arguments_same_records():
    a, _ = synthetic_run(seed=3)
    b, _ = synthetic_run(seed=3)
    assert a.requests == b.requests and a.metrics == b.metrics and a.info == b.info


def test_records_follow_the_load_engine_conventions():
    data, truth = synthetic_run()
    kinds = {r.kind for r in data.requests}
    assert kinds == {"closed", "open", "waves", "ingest", "batch"}
    for r in data.requests:
        assert r.chunk_times == sorted(r.chunk_times)
        assert r.sent_at < r.first_token_at <= r.end_at
        assert len(r.chunk_times) == r.output_tokens == r.output_tokens_target
        if r.kind == "closed":
            assert r.parallel is not None
        if r.kind == "waves":
            assert r.wave == r.parallel
        if r.kind == "open":
            assert r.rate_rps is not None and r.scheduled_at <= r.sent_at
    assert any(r.warmup for r in data.requests if r.kind == "batch")
    names = {m for s in data.metrics for m in s.samples}
    assert {"vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:cache_config_info"} <= names
    assert truth.server.kv_capacity_tokens == 12288


def test_bad_server_settings_are_refused():
    with pytest.raises(ValueError):
        SyntheticServer(engine="bogus")
    with pytest.raises(ValueError):
        SyntheticServer(kv_capacity_tokens=1000, block_size=16)
