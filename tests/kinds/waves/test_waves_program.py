"""The waves' program (cardgen/kinds/waves), driven directly: the search for the saturating wave size,
bisected or stepped, and what it says when it stops. No clock, no socket, no server."""

from __future__ import annotations

import pytest
from programkit import point_of, record_of, sends_in

from cardgen.kinds.program import EndWatch, Verdict, Watch
from cardgen.kinds.waves.program import WaveSearch, WavesProgram


def _search(capacity: int, max_wave: int) -> tuple[list[int], WaveSearch]:
    search = WaveSearch(max_wave=max_wave)
    while (size := search.next_size()) is not None:
        search.report(size, size > capacity)
    return search.sizes, search


@pytest.mark.parametrize("capacity", [1, 5, 37, 98, 200])
def test_wave_search_brackets_the_saturating_size_within_one_request(capacity):
    sizes, search = _search(capacity, 256)
    assert search.bracketed and search.low == capacity and search.high == capacity + 1
    assert len(sizes) <= 2 * 9  # doubling then bisecting: logarithmic, not linear
    assert sizes[:3] == [1, 2, 4][: len(sizes[:3])]


def test_wave_search_stops_at_max_wave_when_nothing_saturates():
    sizes, search = _search(10_000, 100)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 100] and not search.bracketed and search.low == 100


def test_wave_search_refuses_a_report_out_of_turn():
    search = WaveSearch(max_wave=8)
    assert search.next_size() == 1
    with pytest.raises(RuntimeError):
        search.next_size()
    with pytest.raises(RuntimeError):
        search.report(2, False)


def test_a_coarser_wave_search_stops_sooner_but_still_brackets():
    search = WaveSearch(max_wave=512, resolution=16)
    while (size := search.next_size()) is not None:
        search.report(size, size > 104)
    assert search.bracketed and search.low <= 104 < search.high and search.high - search.low <= 16
    assert search.sizes[-1] >= 64 and len(search.sizes) <= 10


def _run_waves(program: WavesProgram, *, capacity: int, readable: bool = True) -> list[int]:
    """Drive waves: a wave saturates above ``capacity``; returns each wave's size."""
    commands, sizes = program.start(), []
    while commands:
        if isinstance(commands[0], Watch):
            commands = commands[1:]
        wave = sends_in(commands)
        sizes.append(len(wave))
        commands = []
        for send in wave:
            commands = program.ended(send, record_of(send, sent=0), 1.0)
        if commands == [EndWatch()]:
            commands = program.watched(Verdict(saturated=readable and len(wave) > capacity, readable=readable), 1.0)
    return sizes


def test_waves_bisect_to_the_saturating_size_and_say_so():
    program = WavesProgram(point_of(kind="waves", max_wave=20, search="bisect", prompt_tokens=8, output_tokens=4))
    assert _run_waves(program, capacity=10) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (program.stop, program.detail) == ("saturated", "between waves of 10 and 11")


def test_stepped_waves_stop_at_the_first_that_saturates_or_say_why_they_could_not_tell():
    step = point_of(kind="waves", max_wave=7, step=3, search="step", prompt_tokens=8, output_tokens=4)
    assert WavesProgram(step).wave_sizes() == [1, 4, 7]
    stopped = WavesProgram(step)
    assert _run_waves(stopped, capacity=3) == [1, 4] and stopped.detail == "wave of 4"
    blind = WavesProgram(step)
    assert _run_waves(blind, capacity=3, readable=False) == [1, 4, 7]
    assert blind.detail == "saturation unknown: the server's /metrics did not answer"
    unwatched = WavesProgram(point_of(kind="waves", max_wave=4, search="step", stop_at_saturation=False,
                                    prompt_tokens=8, output_tokens=4))
    assert not any(isinstance(c, Watch) for c in unwatched.start())
    assert _run_waves(WavesProgram(unwatched.point), capacity=0) == [1, 2, 3, 4]
    calm = WavesProgram(step)
    _run_waves(calm, capacity=100)
    assert (calm.stop, calm.detail) == ("complete", "no wave up to 7 saturated the server")
