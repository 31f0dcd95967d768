"""The SLO search and the trace replay over HTTP, in real time: ``cardgen build --url --price-per-hour`` with the
load engine against the real-time virtual server, which the same suite also runs in virtual time.

- The SLO search's oracle: a server with 2 slots (``max_num_seqs``) whose steps take 2 ms + 0.2 ms a request,
  under a closed loop of 128-token answers (about 0.3 s each). Up to 2 users never wait for a slot: TTFT is the
  rest of the step under way and a prefill step, a few ms. From 3 users on, a request waits for a slot: in step
  (as users that end together send together) one request in 3 waits a whole answer; out of step, every request
  waits for the next of the 2 answers running to end, up to 150 ms. Either way far more than 10 % of the requests
  wait far past 60 ms, so the highest concurrency with TTFT p90 within 60 ms is 2, by a wide margin of time and
  of share on both sides: a busy machine (make test's untimed stage beside this one) has put the p90 at 2 users
  near 30 ms, which a 30 ms limit left undecided. Both clocks find 2 and 3, in four probes (8, 4, 2, 3) of 20 to
  80 requests.
- The Mooncake sample, replayed 8 times faster, leaves at the trace's offsets (send lag stated below) and its
  shared blocks, written as prompt texts by the load engine and tokenized by the server, hit the server's prefix
  cache about as often as the virtual driver's block hashes do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from simruns import simulate

from cardgen.analysis import analyse, load_run
from cardgen.kinds.slosearch.analysis import saved_searches
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.launch import running_sim
from cardgen.suite import parse_suite

pytestmark = pytest.mark.sockets

FIXED = {"prefill_tok_s": 1e9, "step_overhead_s": 0.002, "per_seq_s": 0.0002, "kv_capacity_tokens": 262144,
         "block_size": 16, "max_num_seqs": 2, "max_num_batched_tokens": 65536}
SUITE = """name: slo-and-replay
scenarios:
  - {kind: slo, load: parallel, prompt_tokens: 1, output_tokens: 128, slo: {ttft_p90_s: 0.060}, start: 8,
     min_requests: 20, max_requests: 400}
  - {kind: open, name: prod, dataset: mooncake-sample, speedup: 8, max_requests: 40}
"""
# the load engine's timed sends on a shared 2-core machine (bench_client measures them): the median request leaves
# within 25 ms of its offset, beyond the lateness the load generator measured of its own event loop in the same run
# (its loop lag's 95th percentile: a busy machine makes every wake-up late, the sends' among them); the tail is
# left to the figure (a burst of the trace's sends, or another process on the two cores, delays its last few by up
# to half a second, which the card states as the send lag)
SEND_LAG_P50_S = 0.025


def test_both_clocks_find_the_same_limit_and_replay_the_trace(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(SUITE)
    config = SimConfig(model="test-model", perf="fixed", fixed_json=json.dumps(FIXED))
    virtual = simulate(parse_suite(SUITE), config, options=DriveOptions(), run_dir=tmp_path / "virtual")
    with running_sim(["test-model", "--perf", "fixed", "--fixed-json", json.dumps(FIXED), "--max-lifetime-s",
                      "300"]) as sim:
        real = subprocess.run([sys.executable, "-m", "cardgen", "build", "test-model", "--url", sim.url, "--suite",
                               str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "real"), "--quiet",
                               "--price-per-hour", "3"], capture_output=True, text=True, timeout=300)
    assert real.returncode == 0, real.stderr
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    modelled = analyse(load_run(tmp_path / "virtual")).summary
    (search,), (again,) = summary["kinds"]["slo"]["searches"], saved_searches(modelled)
    assert (again.low, again.high) == (2, 3), again.answer
    for probe in search["probes"]:  # every verdict real time reached is the truth (it may not tell, on a busy box)
        assert probe["met"] is None or probe["met"] is (probe["load"] <= 2), probe
    # real time's bracket holds virtual time's, and is the same unless a probe inside it could not be decided
    # (its interval still straddled the limit when its budget ran out, on a busy box): then it is wider by that
    # probe's load and no more; or unless the search's budget ran out first, which its answer says (a fresh-clone
    # run's probe at 2 was told met with the last of the 400 requests and left (2, 4), 3 unprobed)
    # (low None: no load met, the lowest probe's among the undecided: the bracket reaches down to nothing; a
    # fresh-clone run's probe at 2 spent the budget undecided and left (None, 4))
    low = search["low"] if search["low"] is not None else 0.0
    high = search["high"]
    between = [probe for probe in search["probes"] if low < probe["load"] < high]
    assert low <= 2 and high >= 3, search["answer"]
    assert all(probe["met"] is None for probe in between), search["probes"]
    assert (low, high) == (2, 3) or between or "budget of 400 requests ran out" in search["answer"], search
    assert summary["price_per_gpu_hour"] == 3.0
    # the search's cost is the throughput's at its low end: none where no load met the SLO (a fresh-clone run's
    # probe at 2 spent its budget undecided again and left (None, 4), with no cost to state)
    if search["low"] is not None:
        assert search["usd_per_million_tokens"] > 0, search
    else:
        assert search["usd_per_million_tokens"] is None, search
    (replay,) = summary["replays"]
    assert replay["requests"] == 40 and replay["failed"] == 0
    own_lag_s = load_run(tmp_path / "real").info.loadgen.loop_lag_p95_s or 0.0
    assert replay["send_lag_s"]["p50"] < SEND_LAG_P50_S + own_lag_s, (replay["send_lag_s"], own_lag_s)
    (replayed,) = modelled.replays
    assert replay["prefix_cache_hit_rate"] > 0.3
    assert replay["prefix_cache_hit_rate"] == pytest.approx(replayed.prefix_cache_hit_rate, abs=0.1)
    if (low, high) == (2, 3):
        assert virtual.drive.points[0].detail == search["answer"]
    card = (tmp_path / "real" / "README.md").read_text()
    assert "## Highest concurrency within SLO" in card and "## Trace replay" in card and "## Cost" in card
