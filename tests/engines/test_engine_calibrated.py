"""``cardgen build --url ... --calibrate`` end to end against a real vLLM (CPU build, the tiny model): the five
steps over HTTP on a small suite, and what the run says of itself (run.json's calibration, summary.json's basis,
the card). How true the calibration is on this server is `make bench`'s table (tests/bench/bench_calibrated.py),
not this test's: on two shared cores its spot checks may miss, and the run must then measure those pairs."""

from __future__ import annotations

import json

import pytest
from engine_helpers import SERVED_NAME
from test_engine_e2e import cardgen

from cardgen.calibrated.identify import PROBE_PREFIX

pytestmark = pytest.mark.engine

# two prompts x two outputs x two counts and a short ingestion sweep: 15-30 s on two cores
SUITE = """name: calibrate-smoke
endpoint: completions
timeout_s: 120
scenarios:
  - {kind: ingest, name: ingestion, min_prompt_tokens: 16, max_prompt_tokens: 1000, points: 6, output_tokens: 1}
  - {kind: closed, name: grid, prompt_tokens: [32, 256], output_tokens: [16, 48], parallel: [1, 4],
     min_requests: 4, min_rounds: 2, target_ci: 0.1, max_requests: 16, max_duration_s: 10}
"""


def test_a_calibrated_build_against_real_vllm(vllm_server, tiny_model, tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE, "utf-8")
    out = tmp_path / "run"
    proc = cardgen("build", SERVED_NAME, "--model-config", str(tiny_model / "config.json"), "--url", vllm_server.url,
                   "--suite", str(tmp_path / "suite.yaml"), "--out", str(out), "--calibrate", timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for step in ("1/5 identify", "2/5 fit", "3/5 predict", "4/5 check", "5/5 report"):
        assert f"calibrate {step}" in proc.stderr + proc.stdout, step

    info = json.loads((out / "run.json").read_text("utf-8"))
    cal = info["calibration"]
    settings = {s["name"]: s for s in cal["settings"]}  # read from the server, not assumed
    assert settings["kv_capacity_tokens"]["source"].startswith("vllm:cache_config_info")
    assert settings["max_model_len"]["value"] == 8192
    constants = {c["name"]: c for c in cal["constants"]}
    assert set(constants) >= {"compute_flop_s", "bandwidth_byte_s", "step_overhead_s", "per_seq_overhead_s"}
    for c in constants.values():  # fitted from an A100 profile: a CPU is orders of magnitude slower
        assert c["low"] <= c["value"] <= c["high"] and c["value"] > 0
    assert constants["compute_flop_s"]["value"] < constants["compute_flop_s"]["start"] / 10
    assert cal["fit"]["figures"] >= 6 and cal["residuals"]
    assert [i["name"] for i in cal["identify"]][:1] == ["ingest"] and not any(
        i["name"].startswith(PROBE_PREFIX) for i in cal["identify"])
    measured = {p["name"] for p in info["points"]}
    checked = {c["point"] for c in cal["spot_checks"]}
    assert {"closed-in32-out16-p4", "closed-in32-out48-p4", "closed-in256-out16-p4",
            "closed-in256-out48-p4"} <= checked <= measured  # each pair's largest count, measured
    assert {c["pair"] for c in cal["spot_checks"] if not c["passed"]} == set(cal["remeasured_pairs"])

    summary = json.loads((out / "summary.json").read_text("utf-8"))
    basis = {s["scenario"]: s["basis"] for s in summary["scenarios"]}
    assert {n for n, b in basis.items() if b == "measured"} == measured
    predicted = [s for s in summary["scenarios"] if s["basis"] == "predicted"]
    assert len(basis) == 9 and len(predicted) == 9 - len(measured)
    for s in predicted:  # the same fields as a measured point's
        assert s["speed_from_start_tok_s"]["p50"] > 0 and s["output_tok_s"] > 0 and s["ttft_s"]["p50"] > 0
    card = (out / "README.md").read_text("utf-8")
    assert f"### Calibrated: {len(measured)} points measured, {len(predicted)} predicted" in card
    assert "Fitted constants" in card and "Spot checks:" in card
    for s in predicted[:3]:  # each predicted point is marked where the card lists it
        assert f"{s['scenario']}` (predicted)" in card or f"{s['scenario']} (predicted)" in card, s["scenario"]
