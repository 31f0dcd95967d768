from __future__ import annotations

import pytest

from cardgen.analysis.requests import request_frame
from cardgen.analysis.scenarios import scenario_summaries
from cardgen.analysis.timeseries import server_timeseries
from cardgen.schemas.records import ErrorKind, MetricSample, RequestRecord


def rec(i: int, **kw) -> RequestRecord:
    base = dict(scenario="closed-in100-out11-p2", kind="closed", parallel=2, prompt_tokens_target=100,
                output_tokens_target=11, sent_at=10.0 + i, first_token_at=10.5 + i,
                chunk_times=[10.5 + i + 0.1 * k for k in range(11)], end_at=11.5 + i, prompt_tokens=100,
                output_tokens=11)
    base.update(kw)
    return RequestRecord(**base)


def metrics():
    return [MetricSample(t=t, samples={"vllm:kv_cache_usage_perc": [{"labels": {}, "value": u}],
                                       "vllm:num_requests_running": [{"labels": {}, "value": 2}],
                                       "vllm:num_preemptions_total": [{"labels": {}, "value": p}]})
            for t, u, p in ((9.0, 0.0, 0), (11.0, 0.3, 0), (13.0, 0.5, 2), (20.0, 0.9, 9))]


def test_throughput_goodput_failures_and_server_load():
    records = [rec(i) for i in range(4)]
    records.append(rec(4, error="dropped", error_kind=ErrorKind.STREAM_DROPPED, first_token_at=None, chunk_times=[],
                       output_tokens=None, end_at=14.2))
    records.append(rec(5, sent_at=9.0, warmup=True))
    records[1] = rec(1, first_token_at=14.0, chunk_times=[14.0 + 0.01 * k for k in range(11)], end_at=14.1)
    ts = server_timeseries(metrics(), engine="vllm")
    (s,) = scenario_summaries(request_frame(records), ts, slo_ttft_s=2.0, slo_tpot_s=0.1)
    assert s.requests == 5 and s.warmup_requests == 1 and s.failed == 1
    assert s.failure_rate == pytest.approx(0.2)
    assert s.failures_by_kind == {"stream_dropped": 1}
    assert s.started_unix == 10.0 and s.ended_unix == 14.5
    duration = 4.5
    assert s.duration_s == pytest.approx(duration)
    assert s.req_s == pytest.approx(4 / duration)
    assert s.output_tok_s == pytest.approx(44 / duration)
    assert s.total_tok_s == pytest.approx(444 / duration)
    # request 1 waited 3 s for its first token: misses the TTFT SLO
    assert s.goodput_req_s == pytest.approx(3 / duration)
    assert s.goodput_fraction == pytest.approx(3 / 5)
    assert s.ttft_s.n == 4 and s.ttft_s.p50 == pytest.approx(0.5)
    assert s.tpot_s.p50 == pytest.approx(0.1)
    assert s.itl_s.n == 40
    assert s.kv_usage_max == 0.5 and s.running_max == 2
    assert s.preemptions == 2
    assert s.send_lag_s is None


def test_open_loop_rate_and_all_at_once_with_rate_lost_in_json():
    inf = [rec(i, scenario="open-rinf", kind="open", parallel=None, rate_rps=None, scheduled_at=10.0, sent_at=10.001)
           for i in range(3)]
    poisson = [rec(i, scenario="open-r2", kind="open", parallel=None, rate_rps=2.0, scheduled_at=20.0 + i,
                   sent_at=20.002 + i) for i in range(3)]
    by_name = {s.scenario: s for s in scenario_summaries(request_frame(inf + poisson),
                                                         server_timeseries([], engine="vllm"), slo_ttft_s=2,
                                                         slo_tpot_s=0.1)}
    assert by_name["open-rinf"].all_at_once and by_name["open-rinf"].rate_label == "inf"
    assert by_name["open-r2"].rate_rps == 2.0 and by_name["open-r2"].rate_label == "2"
    assert by_name["open-r2"].send_lag_s.p50 == pytest.approx(0.002)
    assert by_name["open-r2"].kv_usage_max is None


def test_scenarios_in_run_order():
    records = [rec(0, scenario="b", sent_at=50.0), rec(0, scenario="a", sent_at=60.0), rec(1, scenario="b")]
    names = [s.scenario for s in scenario_summaries(request_frame(records), server_timeseries([], engine="vllm"),
                                                    slo_ttft_s=2, slo_tpot_s=0.1)]
    assert names == ["b", "a"]


def test_server_load_is_read_through_the_engine_adapter():
    (s,) = scenario_summaries(request_frame([rec(i) for i in range(4)]), server_timeseries(metrics(), engine="tgi"),
                              slo_ttft_s=2.0, slo_tpot_s=0.1)
    assert s.kv_usage_max is None and s.running_max is None and s.preemptions is None  # vLLM's names, not TGI's
    sglang = [MetricSample(t=t, samples={"sglang:token_usage": [{"labels": {}, "value": u}],
                                         "sglang:num_running_reqs": [{"labels": {}, "value": 3}],
                                         "sglang:num_retracted_requests_total": [{"labels": {}, "value": p}]})
              for t, u, p in ((9.0, 0.1, 1), (12.0, 0.4, 1), (13.0, 0.6, 4))]
    (s,) = scenario_summaries(request_frame([rec(i) for i in range(4)]), server_timeseries(sglang, engine="sglang"),
                              slo_ttft_s=2.0, slo_tpot_s=0.1)
    assert (s.kv_usage_max, s.running_max, s.preemptions) == (0.6, 3, 3)


def test_closed_loop_rounds_still_settling_are_left_out_and_counted():
    # 5 users in step, a round every 2 s: the ramp, 3 rounds with a slow first token, then 8 settled rounds
    records = []
    for k in range(12):
        ttft = 1.0 if 1 <= k <= 3 else 0.5 + 0.002 * (k % 3)
        t = 10.0 + 2.0 * k
        records += [rec(0, scenario="closed-in100-out11-p5", parallel=5, sent_at=t, first_token_at=t + ttft,
                        chunk_times=[t + ttft + 0.05 * j for j in range(11)], end_at=t + 2.0)
                    for _ in range(5)]
    (s,) = scenario_summaries(request_frame(records), server_timeseries([], engine="vllm"), slo_ttft_s=2.0,
                              slo_tpot_s=0.1)
    assert s.steady_state and s.steady_requests == 40 and s.ramp_drain_requests == 20
    assert s.ttft_s.p50 < 0.51
    assert s.req_s == pytest.approx(40 / 16.0, rel=0.01)  # over the 8 settled rounds' window: 18 s to 34 s
