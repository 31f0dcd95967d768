"""Where the time goes, both clocks: the virtual server holding each request ``--host-s-per-token`` per prompt
token before it queues, measured over HTTP by the load engine (the real-time server sleeps it, streams vLLM's
per-request ``metrics`` and observes its TTFT histogram from receipt) and computed in virtual time. Both split each
point's TTFT the same way: the held time is "other server time" within 5 % on both (a loaded machine's event loop
adds milliseconds to the sleep), prompt compute within a few milliseconds, and the network and client part is the
real loopback's on one clock and 0 on the other (so it is bounded, not compared)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from simruns import simulate
from test_two_clocks import FIXED

from cardgen.analysis import analyse, load_run
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.launch import running_sim
from cardgen.sim.served import ServedModel
from cardgen.suite import parse_suite

pytestmark = pytest.mark.sockets

HOST_S_PER_TOKEN = 0.0004  # 512 prompt tokens: about 0.2 s outside compute
SUITE = """name: time
scenarios:
  - kind: closed
    prompt_tokens: 512
    output_tokens: 16
    parallel: [1, 2]
    min_requests: 6
    max_requests: 6
    stop_at_saturation: false
"""


def test_both_clocks_split_the_time_to_first_token_alike(tmp_path):
    suite = parse_suite(SUITE, source="time")
    (tmp_path / "suite.yaml").write_text(SUITE)
    simulate(suite, SimConfig(model="test-model", perf="fixed", fixed_json=json.dumps(FIXED),
                              served=ServedModel(host_s_per_token=HOST_S_PER_TOKEN)),
             options=DriveOptions(), run_dir=tmp_path / "virtual")
    with running_sim(["test-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s", "120",
                      "--host-s-per-token", str(HOST_S_PER_TOKEN)]) as sim:
        real = subprocess.run([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url, "--suite",
                               str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "real"), "--no-card", "--quiet"],
                              capture_output=True, text=True, timeout=120)
    assert real.returncode == 0, real.stderr
    budgets = {clock: analyse(load_run(tmp_path / clock)).summary.time_budget for clock in ("real", "virtual")}
    for scope in ("closed-in512-out16-p1", "closed-in512-out16-p2"):
        r, v = (budgets[clock].of(scope) for clock in ("real", "virtual"))
        assert r is not None and v is not None
        held = HOST_S_PER_TOKEN * 512
        assert v.part("other_server").seconds == pytest.approx(held, rel=1e-3)
        assert r.part("other_server").seconds == pytest.approx(held, rel=0.05)
        assert r.part("prompt").seconds == pytest.approx(v.part("prompt").seconds, abs=0.01)
        assert r.dominant == v.dominant == "other_server"
        assert v.part("network_client").seconds == pytest.approx(0.0, abs=1e-9)
        # the real loopback and the client: 50 ms beyond the lateness the load generator measured of its own
        # event loop in this run (a busy machine delays the client's send after its stamp by that much)
        own_lag_s = load_run(tmp_path / "real").info.loadgen.loop_lag_p95_s or 0.0
        assert 0 <= r.part("network_client").seconds < 0.05 + own_lag_s, own_lag_s
