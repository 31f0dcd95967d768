"""The analysis recovers what the synthetic server is known to do, and says what a thin run lacks."""

from __future__ import annotations

import json

import pytest
from simruns import SyntheticServer, synthetic_run, write_run

from cardgen.analysis import AnalysisOptions, RunData, Summary, analyse, load_run, write_analysis
from cardgen.errors import RenderError
from cardgen.kinds.closed.analysis import ClosedResult
from cardgen.rundir import REQUESTS_JSONL, RUN_JSON, SERVER_METRICS_JSONL
from cardgen.schemas.records import ErrorKind, RequestRecord
from cardgen.schemas.summary import SUMMARY_SCHEMA_VERSION

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

HEADLINE = "closed-in1024-out128-p10"
REQUIRED_KEYS = {"schema_version", "model", "gpu", "engine", "modelled", "prompt_ingestion_tok_s", "kv_cache_tokens",
                 "kv_cache_method", "requests_total", "requests_failed", "headline", "scenarios"}


def test_headline_recovers_the_synthetic_truth(small_run):
    analysis, truth = small_run
    s = analysis.summary
    assert s.headline.prompt_ingestion_tok_s == pytest.approx(truth.server.prefill_tok_s, rel=0.10)
    assert s.headline.prompt_ingestion_tok_s == pytest.approx(truth.server.prefill_tok_s, rel=0.02)
    assert s.ingestion.intercept_s == pytest.approx(truth.server.step_overhead_s, abs=0.004)
    assert s.headline.generation_tok_s_at_10_parallel_1024_128 == pytest.approx(
        truth.median(HEADLINE, "speed_from_start_tok_s"), rel=0.05)
    assert s.headline.decode_tok_s_at_10_parallel_1024_128 == pytest.approx(
        truth.median(HEADLINE, "decode_tok_s"), rel=0.05)
    assert s.headline.kv_cache_tokens == pytest.approx(truth.server.kv_capacity_tokens, rel=0.02)
    assert s.kv_cache_method == "server_config"
    assert s.generation.speed_from_start_ci_low <= s.generation.speed_from_start_tok_s
    assert s.generation.speed_from_start_tok_s <= s.generation.speed_from_start_ci_high
    assert s.missing == [] and s.warnings == []


def test_single_stream_decode_speed_is_the_step_rate(small_run):
    analysis, truth = small_run
    (p1,) = [x for x in analysis.summary.scenarios if x.scenario == "closed-in128-out32-p1"]
    step = truth.server.step_overhead_s + truth.server.per_seq_s
    assert p1.decode_tok_s.p50 == pytest.approx(1 / step, rel=0.03)
    assert p1.tpot_s.p50 == pytest.approx(step, rel=0.03)


def test_summary_json_has_the_required_keys_and_round_trips(small_run, tmp_path):
    analysis, _ = small_run
    text = analysis.summary.to_json()
    data = json.loads(text)
    assert REQUIRED_KEYS <= set(data)
    assert data["gpu_telemetry"]["status"] == "no_telemetry" and data["server_vs_client"]["available"] is True
    assert set(data["headline"]) == {"prompt_ingestion_tok_s", "generation_tok_s_at_10_parallel_1024_128",
                                     "decode_tok_s_at_10_parallel_1024_128", "kv_cache_tokens",
                                     "ttfa_s_at_10_parallel_1024_128"}
    assert data["headline"]["ttfa_s_at_10_parallel_1024_128"] is None and data["reasoning"] is False
    assert data["schema_version"] == SUMMARY_SCHEMA_VERSION == 4
    assert {s["kind"] for s in data["scenarios"]} == {"closed", "open", "waves", "ingest", "batch"}
    assert Summary.model_validate_json(text) == analysis.summary
    assert "NaN" not in text and "Infinity" not in text


def test_written_run_reads_back_to_the_same_analysis(small_run, tmp_path):
    analysis, _ = small_run
    data, _ = synthetic_run()
    write_run(tmp_path, data)
    again = analyse(load_run(tmp_path))
    assert again.summary == analysis.summary
    write_analysis(again, tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["tables"] == sorted(again.summary.tables)


def test_options_change_goodput_and_thresholds(small_run):
    data, _ = synthetic_run()
    strict = analyse(data, options=AnalysisOptions(slo_ttft_s=0.05, min_speed_tok_s=90)).summary
    loose = small_run[0].summary
    by = {s.scenario: s for s in strict.scenarios}
    assert by[HEADLINE].goodput_req_s < {s.scenario: s for s in loose.scenarios}[HEADLINE].goodput_req_s
    assert strict.options["slo_ttft_s"] == 0.05
    (long_pair,) = [c for c in ClosedResult.model_validate(strict.kinds["closed"]).capacity if c.prompt_tokens == 1024]
    assert long_pair.max_parallel_at_min_speed == 1


def test_failures_are_counted_and_left_out_of_latencies():
    data, _ = synthetic_run(server=SyntheticServer(fail_every=7))
    s = analyse(data).summary
    assert s.requests_failed == sum(1 for r in data.requests if r.error) > 0
    assert s.requests_total == len(data.requests)
    for sc in s.scenarios:
        # a closed-loop point's figures are its steady requests (failures are never steady)
        assert sc.ttft_s.n == (sc.steady_requests if sc.steady_state else sc.requests - sc.failed)
        if sc.failed:
            assert sc.failures_by_kind == {"http_status": sc.failed}


def only(data: RunData, **changes) -> RunData:
    return RunData(info=data.info, requests=changes.get("requests", data.requests),
                   metrics=changes.get("metrics", data.metrics), absent=changes.get("absent", ()))


def test_no_successful_request_says_so():
    data, _ = synthetic_run()
    failed = [r.model_copy(update={"error": "refused", "error_kind": ErrorKind.CONNECT, "first_token_at": None,
                                   "chunk_times": [], "output_tokens": None}) for r in data.requests]
    s = analyse(only(data, requests=failed)).summary
    assert s.requests_failed == s.requests_total == len(failed)
    assert any(m.startswith("no request succeeded") and "connect" in m for m in s.missing)
    assert s.headline.prompt_ingestion_tok_s is None
    assert s.headline.generation_tok_s_at_10_parallel_1024_128 is None
    assert s.headline.kv_cache_tokens == data_kv(data)  # the server still declared its capacity


def data_kv(data: RunData) -> float:
    return analyse(data).summary.kv_cache_tokens


def test_missing_scenarios_and_metrics_are_named():
    data, _ = synthetic_run()
    kept = [r for r in data.requests if r.kind == "closed" and r.parallel != 10]
    s = analyse(only(data, requests=kept, metrics=[])).summary
    text = " | ".join(s.missing)
    for phrase in ("no prompt-ingestion sweep", "10 parallel", "server_metrics.jsonl", "no open-loop rates",
                   "no batch sweep", "KV cache capacity not measured"):
        assert phrase in text
    assert s.kv_cache_tokens is None and s.kv_cache_method is None


def test_empty_run_does_not_crash():
    data, _ = synthetic_run()
    s = analyse(only(data, requests=[], metrics=[], absent=(REQUESTS_JSONL, SERVER_METRICS_JSONL))).summary
    assert s.requests_total == 0
    # every point run.json lists keeps its row, with nothing measured
    assert [sc.scenario for sc in s.scenarios] == [p.name for p in data.info.points]
    assert all(sc.requests == 0 and sc.ttft_s.n == 0 for sc in s.scenarios)
    assert any("requests.jsonl is missing or empty" in m for m in s.missing)


def test_ingest_with_one_length_is_not_fitted():
    data, _ = synthetic_run()
    recs = [r for r in data.requests if r.kind != "ingest"]
    recs += [RequestRecord(scenario="ingest", kind="ingest", prompt_tokens_target=100, output_tokens_target=1,
                           sent_at=1.0 + i, first_token_at=1.1 + i, chunk_times=[1.1 + i], end_at=1.1 + i,
                           prompt_tokens=100, output_tokens=1) for i in range(3)]
    s = analyse(only(data, requests=recs)).summary
    assert any("fewer than 3 distinct prompt lengths" in m for m in s.missing)


def test_load_run_errors_are_render_errors(tmp_path):
    with pytest.raises(RenderError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(RenderError, match="no run.json"):
        load_run(tmp_path)
    (tmp_path / RUN_JSON).write_text("{}")
    with pytest.raises(RenderError, match="run.json"):
        load_run(tmp_path)
    data, _ = synthetic_run()
    write_run(tmp_path, data)
    lines = (tmp_path / REQUESTS_JSONL).read_text().splitlines()
    (tmp_path / REQUESTS_JSONL).write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(RenderError, match="line 2"):
        load_run(tmp_path)
    (tmp_path / REQUESTS_JSONL).write_text('{"scenario": "x"}\n')
    with pytest.raises(RenderError, match="schema"):
        load_run(tmp_path)
    (tmp_path / REQUESTS_JSONL).unlink()
    assert REQUESTS_JSONL in load_run(tmp_path).absent


def test_modelled_run_names_the_virtual_server():
    data, _ = synthetic_run(modelled=True)
    s = analyse(data).summary
    assert s.modelled and "Synthetic-GPU" in s.modelled_by and "synthetic" in s.modelled_by


def test_odd_but_valid_records_do_not_crash():
    from cardgen.card import render_card
    from cardgen.schemas.records import MetricSample

    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    base = dict(prompt_tokens_target=64, output_tokens_target=4, sent_at=2e9, first_token_at=2e9 + 0.1,
                chunk_times=[2e9 + 0.1, 2e9 + 0.2], end_at=2e9 + 0.3, output_tokens=4)
    odd = [
        RequestRecord(scenario="custom", kind="mystery", **base),
        RequestRecord(scenario="waves-x", kind="waves", parallel=None, wave=None, **base),
        RequestRecord(scenario="batch-x", kind="batch", parallel=2, repeat=None, **base),
        RequestRecord(scenario="open-x", kind="open", rate_rps=None, scheduled_at=None, **base),
        RequestRecord(scenario="closed-x", kind="closed", parallel=3, **{**base, "end_at": None, "chunk_times": []}),
        RequestRecord(scenario="closed-x", kind="closed", parallel=3, **{**base, "output_tokens": None}),
    ]
    metrics = [MetricSample(t=2e9, error="timeout"),
               MetricSample(t=2e9 + 0.2, samples={"vllm:kv_cache_usage_perc": [{"labels": {}, "value": "NaN"}],
                                                  "vllm:num_requests_running": [{"labels": {}, "value": "x"}],
                                                  "vllm:cache_config_info": [{"labels": {"block_size": "None"},
                                                                             "value": 1}]})]
    analysis = analyse(only(data, requests=data.requests + odd, metrics=data.metrics + metrics))
    assert {s.scenario for s in analysis.summary.scenarios} >= {"custom", "waves-x", "batch-x", "open-x"}
    assert "Performance card" in render_card(analysis, date="2026-01-01")
