"""Injected faults land exactly on their arrival index; the switches that hide features; start-up failures."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from simclient import completion, post, sim_argv

from cardgen.errors import ServerError
from cardgen.sim.faults import FaultPlan
from cardgen.sim.launch import SimHandle, running_sim

SPEC = "http500=3,drop=4,error_event=5,malformed=7,stall=11,slow_first=13"
# arrival index -> fault, worked out by hand (a shared index takes the kind listed first: 12 is http500)
EXPECTED = {1: None, 2: None, 3: "http500", 4: "drop", 5: "error_event", 6: "http500", 7: "malformed", 8: "drop",
            9: "http500", 10: "error_event", 11: "stall", 12: "http500", 13: "slow_first", 14: "malformed",
            15: "http500", 16: "drop"}  # fmt: skip
AFTER = 2
DELAY_S = 0.3


def test_plan_parsing() -> None:
    plan = FaultPlan.parse(SPEC)
    assert {i: plan.fault_for(i) for i in EXPECTED} == EXPECTED
    assert plan.fault_token(6) == 4 and plan.fault_token(1) == 1
    for bad in ("boom=3", "drop", "drop=x", "drop=0"):
        with pytest.raises(ValueError):
            FaultPlan.parse(bad)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimHandle, Path]]:
    tmp = tmp_path_factory.mktemp("faults")
    argv = sim_argv("--faults", SPEC, "--fault-after-tokens", str(AFTER), "--slow-first-s", str(DELAY_S),
                    "--stall-s", str(DELAY_S), "--stamp-log", str(tmp / "stamps.jsonl"), "--no-tokenize",
                    "--hide-cache-config")  # fmt: skip
    with running_sim(argv, log_path=tmp / "server.log") as handle:
        yield handle, tmp / "stamps.jsonl"


@pytest.mark.sockets
def test_each_fault_at_its_index(faulty: tuple[SimHandle, Path]) -> None:
    sim, stamps = faulty
    results = {}
    for index in range(1, 14):
        results[index] = post(sim.url, "/v1/completions", completion(max_tokens=6), timeout_s=10)
    for index in (14, 15, 16):  # the same faults on non-streaming requests
        results[index] = post(
            sim.url, "/v1/completions", completion(max_tokens=6, stream=False, stream_options=None)
        )

    for index, r in results.items():
        kind = EXPECTED[index]
        texts = r.text_times()
        if index >= 14:
            if kind == "malformed":
                assert r.status == 200 and r.error is not None  # the body does not parse
            elif kind == "http500":
                assert r.status == 500
            else:
                assert kind == "drop"
            continue
        if kind is None:
            assert r.status == 200 and r.done and len(texts) == 6, index
        elif kind == "http500":
            assert r.status == 500 and r.body["error"]["code"] == 500 and not r.events
        elif kind == "drop":
            assert r.error is not None and not r.done and len(texts) == AFTER, index
            assert all("usage" not in c for c in r.chunks)
        elif kind == "error_event":
            assert r.done and len(texts) == AFTER
            assert "error" in r.chunks[-1] and all("usage" not in c for c in r.chunks)
        elif kind == "malformed":
            assert r.done and len(texts) == 6 and r.chunks[-1]["usage"]["completion_tokens"] == 6
            assert len(r.chunks) == len(r.events) - 2  # one event is not JSON ([DONE] is the other)
        elif kind == "stall":
            assert not r.done and len(texts) == AFTER  # timed against the server's stamps below
        elif kind == "slow_first":
            assert r.done and len(texts) == 6  # timed against the server's stamps below
    # a non-streaming drop closes the connection without a response
    assert results[16].status == 0 and results[16].error is not None

    text = requests.get(f"{sim.url}/metrics", timeout=5).text
    counts = {kind: 0 for kind in ("http500", "drop", "error_event", "malformed", "stall", "slow_first")}
    for kind in EXPECTED.values():
        if kind:
            counts[kind] += 1
    for kind, n in counts.items():
        assert (
            f'cardgen_sim_faults_total{{engine="0",model_name="test-model",kind="{kind}"}} {float(n)}' in text
        )
    assert "vllm:cache_config_info" not in text and "vllm:num_requests_running" in text

    records: dict[int, dict] = {}
    deadline = time.monotonic() + 3
    while len(records) < len(EXPECTED) and time.monotonic() < deadline:  # the log is flushed every 0.5 s
        time.sleep(0.1)
        lines = stamps.read_text(encoding="utf-8").splitlines() if stamps.exists() else []
        records = {r["index"]: r for r in map(json.loads, lines)}
    assert set(records) == set(EXPECTED)
    for index, kind in EXPECTED.items():
        assert records[index].get("fault") == kind, index
        if index < 14 and kind in ("drop", "error_event", "stall"):
            assert records[index]["output_tokens"] == AFTER and records[index]["finish_reason"] is None
    # the timed faults, against the server's own stamps (one host, one clock): lower bounds hold exactly
    stalled, stamp = results[11], records[11]
    assert stalled.ended - stamp["times"][-1] >= DELAY_S  # the connection was held after the last token
    assert stalled.events[-1][0] - stamp["times"][-1] < DELAY_S / 2  # which came before the stall (150 ms margin)
    slow, stamp = results[13], records[13]
    assert stamp["arrived"] - slow.sent >= DELAY_S  # held back before it joined the queue


@pytest.mark.sockets
def test_hidden_tokenize(faulty: tuple[SimHandle, Path]) -> None:
    sim, _ = faulty
    assert requests.post(f"{sim.url}/tokenize", json={"prompt": "a b"}, timeout=5).status_code == 404


@pytest.mark.sockets
def test_start_failure_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="bogus"):
        with running_sim(["m", "--perf", "fixed", "--fixed-json", '{"bogus": 1}'], log_path=tmp_path / "log"):
            pass


def test_cli_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from cardgen.cli.main import main

    for argv, needle in (
        (["serve-sim", "m", "--perf", "fixed", "--fixed-json", "{bad"], "--fixed-json is not JSON"),
        (["serve-sim", "m", "--perf", "fixed", "--faults", "boom=2"], "unknown fault kind"),
        (["serve-sim", "CodeLlama-7b", "--gpu", "no-such-gpu"], "no-such-gpu"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
