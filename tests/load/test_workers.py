"""``--workers auto`` and the per-point verdict on the client (cardgen.load.workers): pure rules, no load."""

import math

import pytest

from cardgen.kinds import kind_of
from cardgen.kinds.closed.schema import ClosedParams
from cardgen.kinds.depth.schema import DepthParams
from cardgen.kinds.openloop.schema import OpenParams
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.waves.schema import WavesParams
from cardgen.load import workers as w
from cardgen.points import Point


def pt(**fields) -> Point:
    return Point(group="g", endpoint="completions", timeout_s=60.0, **fields)


def closed(parallel: int) -> Point:
    return pt(name=f"closed-p{parallel}", prompt_tokens=16, output_tokens=128, parallel=parallel,
              params=ClosedParams())


def test_a_few_streams_stay_in_one_process():
    choice = w.choose_workers([closed(1), closed(10)], cores=8)
    assert choice.workers == 0 and "one process" in choice.reason and "closed-p10" in choice.reason


def test_many_streams_get_enough_processes_within_the_cores():
    streams = 256
    burst = math.ceil(streams * w.CLIENT_CPU_PER_CHUNK_S / w.BURST_BUDGET_S)
    rate = math.ceil(streams * w.STREAM_CHUNKS_S * w.CLIENT_CPU_PER_CHUNK_S / w.CORE_SHARE)
    need = max(burst, rate)
    assert need > 2  # the rule must matter at 256 streams for this test to mean anything
    assert w.choose_workers([closed(10), closed(streams)], cores=64).workers == need
    capped = w.choose_workers([closed(streams)], cores=2)
    assert capped.workers == 2 and "capped at this machine's 2 cores" in capped.reason


def test_barrier_kinds_do_not_count_and_open_loops_count_their_streams_in_flight():
    waves = pt(name="waves", prompt_tokens=16, output_tokens=32, parallel=4096, params=WavesParams())
    assert w.peak_streams(waves) == 0
    slow = pt(name="open-r100", prompt_tokens=16, output_tokens=128, rate_rps=100.0,
              params=OpenParams(num_requests=600))
    assert w.peak_streams(slow) == math.ceil(100 * 128 / w.STREAM_CHUNKS_S) + 1
    burst = pt(name="open-rinf", prompt_tokens=16, output_tokens=8, rate_rps=math.inf,
               params=OpenParams(num_requests=50))
    assert w.peak_streams(burst) == 50
    assert w.choose_workers([waves], cores=4).workers == 0


def test_a_kind_counts_its_users_in_flight_unless_it_says_otherwise_and_a_barrier_kind_counts_none():
    structured = pt(name="structured-p256", prompt_tokens=64, output_tokens=128, parallel=256,
                    params=StructuredParams(schema="flat"))
    assert kind_of(structured).open_streams(structured, w.STREAM_CHUNKS_S) == 256  # its users, as a closed loop's
    assert w.peak_streams(structured) == 0  # but it runs whole on one process (a barrier kind): it never splits
    depth = pt(name="depth", prompt_tokens=64, output_tokens=8, params=DepthParams())
    assert kind_of(depth).open_streams(depth, w.STREAM_CHUNKS_S) == 0  # one request at a time: no users


@pytest.mark.parametrize("lags,cpus,sends,kept", [
    ([0.001, 0.002], [30.0], [], True),
    ([0.001] * 19 + [0.050] * 2, [30.0], [], False),  # lagged in more than 1 second in 20
    ([0.001], [95.0], [], False),
    ([0.001], [30.0], [0.0001] * 98 + [0.02] * 2, False),  # open loop: requests left late
    ([], [], [], None),
])
def test_the_client_kept_up_or_not_with_its_figures(lags, cpus, sends, kept):
    verdict, words = w.client_verdict(loop_lags_s=lags, cpu_percents=cpus, send_lags_s=sends)
    assert verdict is kept
    if kept is True:
        assert words.startswith("kept up: event-loop lag p95")
    elif kept is False:
        assert words.startswith("fell behind: ") and "limits" in words
    else:
        assert words is None
