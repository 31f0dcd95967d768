"""Server vs client: the synthetic server publishes vLLM's histograms from its own (known) times, so the client
minus server difference must be what the simulated network adds; a recorded vLLM 0.32 scrape checks the real
format."""

from __future__ import annotations

from pathlib import Path

import pytest
from simruns import SyntheticServer, synthetic_run

from cardgen.analysis import RunData, analyse
from cardgen.analysis.crosscheck import bucket_bounds, server_vs_client
from cardgen.analysis.requests import request_frame
from cardgen.engines import histogram_quantile, metric_candidates
from cardgen.promtext import parse_metrics
from cardgen.schemas.records import MetricSample, RequestRecord

RECORDED = Path(__file__).resolve().parents[1] / "data" / "engines" / "vllm_0.32.0_cpu_metrics.txt"
SUITE = """
name: cross
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 1024]
  - kind: closed
    prompt_tokens: [512]
    output_tokens: [64]
    parallel: [1, 8]
    min_requests: 16
"""


def by_metric(window):
    return {c.metric: c for c in window.latencies}


def tokens(window):
    return {t.tokens: t for t in window.tokens}


@pytest.fixture(scope="module")
def cross():
    data, truth = synthetic_run(suite=SUITE)
    return analyse(data).summary.server_vs_client, truth


def test_client_minus_server_is_the_network(cross):
    v, truth = cross
    net = truth.server.network_s
    assert v.available and v.reason is None
    run = by_metric(v.run)
    n = v.run.requests
    assert n == 3 + 16 + 16 and v.run.requests_failed == 0 and v.run.straddling == 0
    assert run["ttft"].server_metric == "vllm:time_to_first_token_seconds"
    assert run["ttft"].server_count == run["ttft"].client_count == n
    assert run["e2e"].server_count == run["e2e"].client_count == n
    # the request travels to the server (net), each token back (net + up to 0.2 ms of jitter)
    assert 2 * net <= run["ttft"].diff_mean_s <= 2 * net + 0.0002
    assert 2 * net <= run["e2e"].diff_mean_s <= 2 * net + 0.0006  # + the stream's end after the last token
    assert run["itl"].server_metric == "vllm:inter_token_latency_seconds"
    assert run["itl"].server_count == run["itl"].client_count == 3 * 0 + 16 * 63 * 2
    assert abs(run["itl"].diff_mean_s) < 2e-6 and run["itl"].note is None
    assert run["queue"].server_count == n and run["queue"].client_mean_s is None
    assert run["queue"].server_mean_s >= 0
    out, prompt = tokens(v.run)["output"], tokens(v.run)["prompt"]
    assert out.server_counter == "vllm:generation_tokens_total" and out.diff == 0
    assert out.client_tokens == 3 * 1 + 2 * 16 * 64
    assert prompt.diff == 0 and prompt.client_tokens == 16 + 256 + 1024 + 2 * 16 * 512  # no preemption here


def test_server_percentiles_are_interpolated_inside_their_bucket(cross):
    v, _ = cross
    for c in v.run.latencies:
        for value, bucket in ((c.server_p50_s, c.server_p50_bucket_s), (c.server_p90_s, c.server_p90_bucket_s)):
            low, high = bucket
            assert low <= value and (high is None or value <= high)
        assert c.diff_p50_s == (None if c.client_p50_s is None else pytest.approx(c.client_p50_s - c.server_p50_s))


def test_every_closed_point_gets_its_own_window(cross):
    v, truth = cross
    assert [p.scope for p in v.points] == ["closed-in512-out64-p1", "closed-in512-out64-p8"]
    for p in v.points:
        m = by_metric(p)
        assert p.requests == 16 and p.straddling == 0
        assert m["ttft"].server_count == m["ttft"].client_count == 16
        assert m["itl"].server_count == 16 * 63
        assert 2 * truth.server.network_s <= m["ttft"].diff_mean_s <= 2 * truth.server.network_s + 0.0002
        assert tokens(p)["output"].diff == 0 and tokens(p)["output"].client_tokens == 16 * 64
        assert v.run.start_unix <= p.start_unix < p.end_unix <= v.run.end_unix


def test_preempted_prompts_are_counted_once_by_the_server():
    data, truth = synthetic_run()  # the small suite's waves saturate the cache
    v = analyse(data).summary.server_vs_client
    assert truth.preemptions > 0
    prompt = tokens(v.run)["prompt"]
    # the virtual server counts a prompt at its first token, once, as vLLM V1 does: a recomputed prompt does not
    # count again
    assert prompt.diff == 0 and prompt.server_tokens == prompt.client_tokens
    assert tokens(v.run)["output"].diff == 0


def test_older_vllm_names_and_servers_without_histograms():
    old = analyse(synthetic_run(suite=SUITE, server=SyntheticServer(engine="vllm-old"))[0]).summary
    itl = by_metric(old.server_vs_client.run)["itl"]
    assert itl.server_metric == "vllm:time_per_output_token_seconds" and abs(itl.diff_mean_s) < 2e-6
    bare = analyse(synthetic_run(suite=SUITE, server=SyntheticServer(expose_histograms=False))[0]).summary
    v = bare.server_vs_client
    assert v.available and all(c.server_metric is None and c.diff_mean_s is None for c in v.run.latencies)
    assert tokens(v.run)["output"].diff == 0


def test_unavailable_says_why():
    tgi = analyse(synthetic_run(suite=SUITE, server=SyntheticServer(engine="tgi"))[0]).summary.server_vs_client
    assert not tgi.available and "no latency histogram" in tgi.reason
    assert "tgi_request_duration" in tgi.reason and "vllm:" not in tgi.reason  # TGI's own names, not vLLM's
    data, _ = synthetic_run(suite=SUITE)
    server = data.info.server.model_copy(update={"engine": "unknown"})
    unknown = RunData(info=data.info.model_copy(update={"server": server}), requests=data.requests,
                      metrics=data.metrics)
    v = analyse(unknown).summary.server_vs_client  # vLLM's metrics, but nothing says the server is vLLM
    assert not v.available and "knows no latency histogram" in v.reason
    data, _ = synthetic_run(suite=SUITE)
    none = analyse(RunData(info=data.info, requests=data.requests, metrics=[])).summary.server_vs_client
    assert not none.available and "server_metrics.jsonl" in none.reason
    one = analyse(RunData(info=data.info, requests=data.requests, metrics=data.metrics[-1:])).summary
    assert not one.server_vs_client.available and "only one" in one.server_vs_client.reason


def test_failed_and_straddling_requests_are_counted_apart():
    data, _ = synthetic_run(suite=SUITE, server=SyntheticServer(fail_every=5))
    v = analyse(data).summary.server_vs_client
    assert v.run.requests_failed == sum(1 for r in data.requests if not r.ok) > 0
    assert by_metric(v.run)["ttft"].server_count == by_metric(v.run)["ttft"].client_count == v.run.requests
    late = analyse(RunData(info=data.info, requests=data.requests, metrics=data.metrics[4:])).summary
    assert late.server_vs_client.run.straddling > 0  # the first scrape came after the first requests


def test_metric_names_come_from_the_engines_adapter_only():
    assert metric_candidates("vllm", "itl") == ("vllm:inter_token_latency_seconds",
                                                "vllm:time_per_output_token_seconds")
    assert metric_candidates("cardgen-sim", "ttft") == ("vllm:time_to_first_token_seconds",)
    assert metric_candidates("sglang", "ttft") == ("sglang:time_to_first_token_seconds",)
    assert metric_candidates("tgi", "ttft") == ()  # TGI has no time-to-first-token histogram
    assert metric_candidates(None, "ttft") == metric_candidates("some-new-engine", "e2e") == ()


def test_bucket_bounds():
    hist = {"buckets": [[0.1, 2.0], [0.5, 6.0], [1.0, 8.0], [float("inf"), 10.0]]}
    assert bucket_bounds(hist, 0.5) == [0.1, 0.5]
    assert histogram_quantile(hist, 0.5) == pytest.approx(0.1 + 0.4 * 3 / 4)
    assert bucket_bounds(hist, 0.95) == [1.0, None]
    assert bucket_bounds({"buckets": [[1.0, 0.0], [float("inf"), 0.0]]}, 0.5) is None


def test_recorded_vllm_scrape():
    """vLLM 0.32's own /metrics after one streamed completion of 32 tokens with a 6-token prompt."""
    t0 = 1_795_291_490.0
    before = MetricSample(t=t0, samples={"vllm:num_requests_running": [{"labels": {}, "value": 0.0}]})
    after = MetricSample(t=t0 + 2, samples=parse_metrics(RECORDED.read_text("utf-8")))
    chunks = [t0 + 1.031 + 0.0038 * i for i in range(32)]
    record = RequestRecord(scenario="one", kind="closed", parallel=1, prompt_tokens_target=6, output_tokens_target=32,
                           sent_at=t0 + 1.0, first_token_at=chunks[0], chunk_times=chunks, end_at=chunks[-1] + 0.001,
                           prompt_tokens=6, output_tokens=32)
    v = server_vs_client([before, after], request_frame([record]), [], engine="vllm")
    m = by_metric(v.run)
    assert m["ttft"].server_count == 1 and m["ttft"].server_mean_s == pytest.approx(0.030178308486938477)
    assert m["ttft"].diff_mean_s == pytest.approx(0.031 - 0.030178308486938477, abs=1e-6)  # float64 at 1.8e9 s
    assert m["itl"].server_count == m["itl"].client_count == 31
    assert m["itl"].server_mean_s == pytest.approx(0.11672447299997657 / 31)
    assert m["e2e"].server_mean_s == pytest.approx(0.14624476432800293)
    assert m["queue"].server_mean_s == pytest.approx(3.475200003322243e-05)
    assert {t.tokens: (t.client_tokens, t.server_tokens) for t in v.run.tokens} == {"prompt": (6, 6.0),
                                                                                    "output": (32, 32.0)}


def _client_side_request_by_request(frame, t0, t1):
    """The client's side of a window, request by request (the way it was computed before it was taken by
    columns): the oracle the columns must meet to the bit."""
    import numpy as np

    output, tokens_, span, partial, gaps = 0, 0.0, 0.0, False, []
    for times, out, ok, sent, end in zip(frame["chunk_times"], frame["output_tokens"], frame["ok"],
                                         frame["sent_at"], frame["end_at"], strict=True):
        end = end if np.isfinite(end) else sent
        if not ok or not (sent <= t1 and end > t0) or len(times) == 0:
            continue
        n = int(out) if np.isfinite(out) else 0
        step = np.diff(times)
        if len(times) > 1 and times[0] > t0 and times[-1] <= t1 and step.min() >= 0:
            output, span, tokens_ = output + n, span + float(step.sum()), tokens_ + max(n - 1, 0)
            gaps.append(step)
            continue
        inside = (np.asarray(times) > t0) & (np.asarray(times) <= t1)
        if inside.all():
            output += n
        elif inside.any():
            output, partial = output + int(inside.sum()), True
        later = inside[1:]
        if len(times) > 1 and later.any():
            span += float(step[later].sum())
            tokens_ += max(n - 1, 0) if later.all() else float(later.sum())
            gaps.append(step[later])
    return output, tokens_, span, partial, np.concatenate(gaps) if gaps else np.empty(0)


def test_the_client_side_by_columns_is_the_request_by_request_one_to_the_bit():
    """Requests of many lengths (one chunk, none, out of order, failed), windows cutting through them: the
    tokens, the gaps' span (its float, added in the requests' order), the approximate flag and the pooled gaps are
    what a request-by-request reading gives, and the chunk facts' sums are each request's own numpy sum."""
    import numpy as np

    from cardgen.analysis.crosscheck import _Chunks, _client_side
    from cardgen.outcome import chunk_gaps_s

    rng = np.random.default_rng(3)
    rows = []
    for i in range(2000):
        size = int(rng.choice([0, 1, 2, 5, 8, 9, 127, 128, 129, 300]))
        sent = rng.uniform(0, 60)  # near 0: a gap's float is not a whole number of a stamp's last bits
        steps = rng.lognormal(-4, 2.5, size)  # of many sizes: a sum's order shows in its last bits
        if i % 37 == 0 and size > 2:
            steps[1] = -steps[1]  # out of order
        times = sent + 0.05 + np.cumsum(steps) if size else np.empty(0)
        ok = i % 29 != 0
        rows.append(RequestRecord(scenario="s", kind="closed", group="g", endpoint="completions",
                                  prompt_tokens_target=8, output_tokens_target=size, index=i, sent_at=sent,
                                  first_token_at=float(times[0]) if size else None, chunk_times=times.tolist(),
                                  end_at=float(times.max()) + 0.001 if size else sent + 0.01,
                                  output_tokens=size if ok else None, prompt_tokens=8,
                                  error=None if ok else "HTTP 500"))
    frame = request_frame(rows)
    chunks = _Chunks.of(frame)
    for i, times in enumerate(chunks.times):
        if len(times) > 1:
            assert chunks.gap_sum[i] == chunk_gaps_s(times).sum()
            assert chunks.in_order[i] == (chunk_gaps_s(times).min() >= 0)
    for t0, t1 in [(-1000.0, 1000.0), (10.0, 40.0), (30.5, 31.0)]:
        side = _client_side(frame, t0, t1, chunks)
        output, tokens_, span, partial, gaps = _client_side_request_by_request(frame, t0, t1)
        assert (side.output_tokens, side.gap_tokens, side.approximate_tokens) == (output, tokens_, partial)
        assert side.gap_span_s == span  # the same float, not a close one
        assert np.array_equal(side.gaps.block(0, side.gaps.n), gaps)
        alone = _client_side(frame, t0, t1)  # its chunk facts made there
        assert (alone.gap_span_s, alone.output_tokens, alone.requests) == (side.gap_span_s, output, side.requests)
