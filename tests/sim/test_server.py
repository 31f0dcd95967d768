"""The virtual server over HTTP: vLLM's streaming format, /tokenize, /metrics served, disconnects, the stamp log
against the stream, and the real-time server's own timing. Its scheduling and metrics are tested in virtual
time (test_virtual_server.py)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import requests
from simclient import FIXED, MODEL, completion, post, read_stamps

from cardgen.promtext import parse_metrics
from cardgen.schemas.records import MetricSample
from cardgen.sim.launch import SimHandle

# the real-time server's HTTP layer and its own timing
pytestmark = pytest.mark.sockets


def metrics(url: str) -> MetricSample:
    """What ``/metrics`` answers now, parsed as the scraper parses it."""
    return MetricSample(t=0.0, samples=parse_metrics(requests.get(f"{url}/metrics", timeout=5).text))


def test_identity_endpoints(sim: SimHandle) -> None:
    assert requests.get(f"{sim.url}/health", timeout=5).status_code == 200
    version = requests.get(f"{sim.url}/version", timeout=5).json()
    assert version["engine"] == "cardgen-sim" and version["version"]
    models = requests.get(f"{sim.url}/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    described = sim.describe
    assert described["modelled"] is True and described["model"] == MODEL
    assert described["perf"]["kind"] == "fixed"
    assert described["scheduler"]["num_gpu_blocks"] == FIXED["kv_capacity_tokens"] // FIXED["block_size"]


def test_streaming_completion_format(sim: SimHandle) -> None:
    r = post(sim.url, "/v1/completions", completion(prompt_words=12, max_tokens=7))
    assert r.status == 200 and r.error is None and r.done
    chunks = r.chunks
    assert len(chunks) == 7 + 1  # one chunk per token, then usage
    assert len({(c["id"], c["object"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[0]["id"].startswith("cmpl-") and chunks[0]["object"] == "text_completion"
    assert chunks[0]["model"] == MODEL
    texts = [c["choices"][0]["text"] for c in chunks[:-1]]
    assert all(t.startswith(" ") and len(t.split()) == 1 for t in texts)
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 6 + ["length"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


def test_streaming_chat_format(sim: SimHandle) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}  # fmt: skip
    r = post(sim.url, "/v1/chat/completions", body)
    assert r.status == 200 and r.done
    chunks = r.chunks
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["id"].startswith("chatcmpl-") and chunks[0]["object"] == "chat.completion.chunk"
    assert len({c["id"] for c in chunks}) == 1
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert len(contents) == 5 and all(contents)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    assert len(r.text_times()) == 5  # the role-only chunk carries no text


def test_no_usage_chunk_unless_asked(sim: SimHandle) -> None:
    r = post(sim.url, "/v1/completions", completion(max_tokens=3, stream_options=None))
    assert r.done and all("usage" not in c for c in r.chunks) and len(r.chunks) == 3


def test_non_streaming(sim: SimHandle) -> None:
    r = post(
        sim.url,
        "/v1/completions",
        completion(prompt_words=4, max_tokens=6, stream=False, stream_options=None),
    )
    assert r.status == 200
    assert r.body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    assert len(r.body["choices"][0]["text"].split()) == 6
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a b c"}],
        "max_tokens": 3,
        "ignore_eos": True,
    }
    r = post(sim.url, "/v1/chat/completions", body)
    assert r.body["object"] == "chat.completion" and r.body["choices"][0]["message"]["role"] == "assistant"
    assert r.body["usage"]["completion_tokens"] == 3


def test_tokenize_agrees_with_usage(sim: SimHandle) -> None:
    prompt = "one two  three\nfour five"
    tok = requests.post(f"{sim.url}/tokenize", json={"model": MODEL, "prompt": prompt}, timeout=5).json()
    assert tok["count"] == len(tok["tokens"]) == 5 and tok["max_model_len"] == FIXED["kv_capacity_tokens"]
    r = post(sim.url, "/v1/completions", completion(max_tokens=2, prompt=prompt))
    assert r.chunks[-1]["usage"]["prompt_tokens"] == tok["count"]

    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is a token"}]
    tok = requests.post(f"{sim.url}/tokenize", json={"model": MODEL, "messages": messages}, timeout=5).json()
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    r = post(sim.url, "/v1/chat/completions", body)
    assert r.chunks[-1]["usage"]["prompt_tokens"] == tok["count"] == 2 + 4 + 2 * 4 + 3
    detok = requests.post(
        f"{sim.url}/detokenize", json={"model": MODEL, "tokens": [1, 2, 3]}, timeout=5
    ).json()
    assert len(detok["prompt"].split()) == 3


def test_output_length(sim: SimHandle) -> None:
    # ignore_eos, or min_tokens = max_tokens: exactly max_tokens
    r = post(sim.url, "/v1/completions", completion(max_tokens=40))
    assert r.chunks[-1]["usage"]["completion_tokens"] == 40 and len(r.text_times()) == 40
    r = post(sim.url, "/v1/completions", completion(max_tokens=40, ignore_eos=False, min_tokens=40))
    assert r.chunks[-1]["usage"]["completion_tokens"] == 40
    # without them, this server's modelled EOS (rate 0.2 per token) ends a long output early
    r = post(sim.url, "/v1/completions", completion(max_tokens=200, ignore_eos=False))
    n = r.chunks[-1]["usage"]["completion_tokens"]
    assert 1 <= n < 200 and r.chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert len(r.text_times()) == n


def test_bad_requests(sim: SimHandle) -> None:
    r = requests.post(f"{sim.url}/v1/completions", json={"model": "other", "prompt": "x"}, timeout=5)
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = requests.post(f"{sim.url}/v1/completions", json={"prompt": "x " * 4000, "max_tokens": 200}, timeout=5)
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
    r = requests.post(f"{sim.url}/v1/completions", data=b"{nope", timeout=5)
    assert r.status_code == 400
    r = requests.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 0}, timeout=5)
    assert r.status_code == 400


def test_metrics_are_served_as_prometheus_text_with_the_real_time_emit_lag(sim: SimHandle) -> None:
    """/metrics over HTTP parses and counts what came over HTTP; the families and their counting rules are tested in
    virtual time (test_virtual_server.py). The emission lag is the one real-time figure."""
    before = metrics(sim.url)
    assert len(before.samples["vllm:cache_config_info"]) == 1
    post(sim.url, "/v1/completions", completion(prompt_words=9, max_tokens=11))
    after = metrics(sim.url)
    for name, n in (("vllm:prompt_tokens_total", 9), ("vllm:generation_tokens_total", 11)):
        assert after.value(name, model_name=MODEL) - before.value(name, model_name=MODEL) == n
    count = "vllm:time_to_first_token_seconds_count"
    assert after.value(count) - before.value(count) == 1
    assert after.value("cardgen_sim_emit_lag_seconds_count") > 0


def test_a_client_that_goes_away_is_aborted_and_its_blocks_freed(sim: SimHandle) -> None:
    """The disconnect is the socket's; what an abort frees is tested in virtual time (test_virtual_server.py)."""
    base = metrics(sim.url).value("vllm:request_success_total", finished_reason="abort")
    resp = requests.post(f"{sim.url}/v1/completions", json=completion(prompt_words=700, max_tokens=1000), stream=True,
                         timeout=10)  # fmt: skip
    chunks = resp.iter_content(chunk_size=None)
    next(chunks)
    running = metrics(sim.url)
    assert running.value("vllm:num_requests_running") == 1 and running.value("vllm:kv_cache_usage_perc") > 0
    resp.close()  # the client goes away
    m = running
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # a poll on the server's own counter, not a fixed sleep
        m = metrics(sim.url)
        if m.value("vllm:request_success_total", finished_reason="abort") > base:
            break
        time.sleep(0.05)
    assert m.value("vllm:request_success_total", finished_reason="abort") == base + 1
    assert m.value("vllm:num_requests_running") == 0 and m.value("vllm:kv_cache_usage_perc") == 0


def test_stamp_log_matches_the_stream(sim: SimHandle, stamp_path: Path) -> None:
    sim.get_json("/cardgen/sim/lag?reset=1")  # the lags measured from here on are this request's
    r = post(sim.url, "/v1/completions", completion(prompt_words=500, max_tokens=30))
    late_s = sim.get_json("/cardgen/sim/lag")["max"]  # how late the server wrote any of its tokens, by its account
    rid = r.chunks[0]["id"]
    record = read_stamps(stamp_path, {rid})[rid]
    arrivals = r.text_times()
    assert record["output_tokens"] == len(record["times"]) == len(arrivals) == 30
    assert record["prompt_tokens"] == 500 and record["finish_reason"] == "length" and "fault" not in record
    assert record["times"] == sorted(record["times"])
    # every chunk arrives after the server stamped it (2 ms: the stamp is taken just after the write), and soon after
    # (a median of 50 ms on loopback, with the other tests' processes sharing the cores)
    delays = [a - s for a, s in zip(arrivals, record["times"], strict=True)]
    assert min(delays) > -0.002 and statistics.median(delays) < 0.05
    # and the real-time server keeps the modelled times (test_virtual_server.py has them exactly): TTFT = overhead +
    # P / prefill rate within 4 ms, then one step per token, its median within 1.5 ms, judged on its own stamps,
    # each with the slack the server measured of itself in this request (a token written late by its emission lag
    # moves a stamp by that lag; a busy machine makes it late, never early)
    assert r.sent <= record["arrived"] <= record["times"][0]
    ttft = record["times"][0] - record["arrived"]
    assert ttft == pytest.approx(FIXED["step_overhead_s"] + 500 / FIXED["prefill_tok_s"], abs=0.004 + late_s)
    gaps = [b - a for a, b in zip(record["times"], record["times"][1:], strict=False)]
    step = FIXED["step_overhead_s"] + FIXED["per_seq_s"]
    assert statistics.median(gaps) == pytest.approx(step, abs=0.0015 + late_s)


def test_parallel_streams_share_steps(sim: SimHandle) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda _: post(sim.url, "/v1/completions", completion(max_tokens=20)), range(8))
        )
    assert all(r.done and r.chunks[-1]["usage"]["completion_tokens"] == 20 for r in results)
    lag = sim.get_json("/cardgen/sim/lag")
    assert lag["count"] > 0 and lag["p50"] < 0.01


def test_a_plain_x_request_id_names_the_response_as_vllm_does(sim: SimHandle) -> None:
    body = completion(prompt_words=4, max_tokens=2)
    named = requests.post(f"{sim.url}/v1/completions", json=body, headers={"X-Request-Id": "bench-7"}, timeout=10)
    assert all(e["id"] == "cmpl-bench-7" for e in (
        json.loads(line[6:]) for line in named.text.split("\n\n") if line.startswith("data: {")))
    odd = requests.post(f"{sim.url}/v1/completions", json=body, headers={"X-Request-Id": 'x"y'}, timeout=10)
    ids = {line.split('"id":"', 1)[1].split('"', 1)[0] for line in odd.text.split("\n\n") if '"id":"' in line}
    assert len(ids) == 1 and ids.pop() not in ("cmpl-x", 'cmpl-x"y')  # not a plain id: a random one
