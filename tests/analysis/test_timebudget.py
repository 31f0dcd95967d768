"""Where the time goes, in virtual time: the virtual server holds every request ``--host-s-per-token`` seconds per
prompt token before it joins the queue (as llama.cpp's host prompt cache held 1,024-token prompts 8-12 s on an
H100, ahead of 60 ms of prompt compute). The decomposition must recover that time as "other server time", the
card's note must name it and its cause, and the card must not call a server that is slow per request saturated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from simruns import simulate

from cardgen.analysis import analyse, load_run
from cardgen.card.render import render_run
from cardgen.diff.compute import diff_samples
from cardgen.diff.format import format_diff
from cardgen.diff.sample import bootstrap_digests, run_sample
from cardgen.gpu.summary import summarize_gpu
from cardgen.saturation import skip_words
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.served import ServedModel
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

# the H100 run: ~10 s outside compute for a 1,024-token prompt, then ~6 ms a token of decode
HOST_S_PER_TOKEN = 0.01
SUITE = """name: h100-pattern
scenarios:
  - kind: ingest
    prompt_tokens: [128, 512, 1024]
    output_tokens: 1
  - kind: closed
    prompt_tokens: 1024
    output_tokens: 32
    parallel: [1, 4, 10]
    min_requests: 6
    max_requests: 8
"""
NETWORK_S = 0.002


def _run(tmp_path: Path, host_s: float, name: str) -> Path:
    served = ServedModel(host_s_per_token=host_s)
    run = tmp_path / name
    simulate(parse_suite(SUITE, source="t"), SimConfig(model="CodeLlama-7b", gpu="H100", served=served),
             options=DriveOptions(network_s=NETWORK_S), run_dir=run)
    render_run(run)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("timebudget")
    return _run(tmp, 0.0, "plain"), _run(tmp, HOST_S_PER_TOKEN, "held")


def test_the_decomposition_recovers_the_time_outside_compute(runs):
    _, held = runs
    summary = json.loads((held / "summary.json").read_text())
    tb = summary["time_budget"]
    assert tb["available"]
    p1 = next(b for b in tb["points"] if b["scope"] == "closed-in1024-out32-p1")
    parts = {p["part"]: p for p in p1["parts"]}
    assert set(parts) == {"queue", "prompt", "other_server", "network_client"}
    assert parts["other_server"]["seconds"] == pytest.approx(HOST_S_PER_TOKEN * 1024, rel=1e-3)  # what was held
    assert parts["other_server"]["share"] > 0.99
    assert parts["network_client"]["seconds"] == pytest.approx(2 * NETWORK_S, abs=1e-6)  # there and back
    assert parts["prompt"]["seconds"] < 0.1  # prompt compute is what the GPU spends: milliseconds
    total = sum(p["seconds"] for p in p1["parts"])
    assert total == pytest.approx(p1["client_ttft_s"], rel=1e-9)  # the parts add up to the client's TTFT
    assert p1["dominant"] == "other_server" and "--host-s-per-token" in p1["hint"]
    assert p1["engine_decode_per_token_s"] == pytest.approx(p1["client_itl_s"], rel=1e-6)  # no jitter: equal
    ingest = next(b for b in tb["points"] if b["scope"] == "ingest")
    fit = summary["ingestion"]
    assert ingest["engine_prompt_tok_s"] > 50 * fit["tok_s"]  # the engine's own speed, beside the client's


def test_the_card_names_the_part_and_does_not_call_a_slow_server_saturated(runs):
    _, held = runs
    card = (held / "README.md").read_text()
    assert "> - Other server time takes most of the time to first token at " in card
    assert "the virtual server's host time per prompt token (--host-s-per-token)" in card
    assert "saturated at 1 parallel" not in card
    assert "below 20 tok/s per request already at 1 parallel" in card and "slow per request, not saturated" in card
    assert "--run-saturated runs them" in card
    assert "The engine's own ingestion speed:" in card
    assert "![Each point's mean time to first token by part](figures/time_budget.png)" in card
    info = json.loads((held / "run.json").read_text())
    skipped = next(p for p in info["points"] if p["name"] == "closed-in1024-out32-p4")
    assert skipped["detail"].startswith("not run: below 20 tok/s per request already at 1 parallel")
    assert "not run: not run" not in card


def test_without_the_knob_the_server_time_is_compute_and_nothing_is_named(runs):
    plain, _ = runs
    summary = json.loads((plain / "summary.json").read_text())
    for b in summary["time_budget"]["points"]:
        parts = {p["part"]: p["seconds"] for p in b["parts"]}
        assert abs(parts["other_server"]) < 1e-9 and b["dominant"] is None
    assert "Where the time goes (see" not in (plain / "README.md").read_text()


def test_diff_says_which_part_changed(runs):
    plain, held = runs
    a, b = (run_sample(analyse(load_run(r)).summary, bootstrap_digests(analyse(load_run(r))), path=str(r))
            for r in (plain, held))
    d = diff_samples(a, b)
    point = next(p for p in d.points if p.scenario_a == "closed-in1024-out32-p1")
    cause = point.ttft_cause
    assert cause is not None and cause.key == "ttft_part/other_server"
    assert cause.b - cause.a == pytest.approx(HOST_S_PER_TOKEN * 1024, rel=1e-3)
    prompt = next(f for f in point.figures if f.key == "ttft_part/prompt")
    assert prompt.interval == "bootstrap" and not prompt.significant  # compute did not change
    assert "TTFT: the part that changed most is other server time (+10.2 s)" in format_diff(d)


def test_skip_words_tell_slow_from_saturated():
    slow = skip_words(1, "median speed 11.9 tok/s below 20", first=True)
    assert slow == ("not run: below 20 tok/s per request already at 1 parallel (median speed 11.9 tok/s): the server "
                    "is slow per request, not saturated (skipped for that reason; --run-saturated runs them)")
    assert skip_words(4, "median speed 11.9 tok/s below 20", first=False) == \
        "not run: the server saturated at 4 parallel (median speed 11.9 tok/s below 20)"
    assert skip_words(1, "KV cache 97% full; median speed 3.0 tok/s below 20", first=True).startswith(
        "not run: the server saturated at 1 parallel")


def test_energy_covers_the_whole_measured_window():
    """Samples every 0.5 s from 0.3 s to 9.8 s of a window from 0 to 10 s, at a constant 500 W: the counter's
    increase covers 9.5 s; the window's edges are extended at the nearest samples' power."""
    records = [{"t": 0.3 + 0.5 * i, "gpu": 0, "power_w": 500.0, "energy_mj": 500.0 * (0.3 + 0.5 * i) * 1000}
               for i in range(20)]
    g = summarize_gpu(records, 1000, start_unix=0.0, end_unix=10.0)
    assert g["energy_j"] == pytest.approx(5000.0) and g["duration_s"] == 10.0 and g["sampled_s"] == 9.5
    power_only = [{k: v for k, v in r.items() if k != "energy_mj"} for r in records]
    assert summarize_gpu(power_only, 1000, start_unix=0.0, end_unix=10.0)["energy_j"] == pytest.approx(5000.0)
