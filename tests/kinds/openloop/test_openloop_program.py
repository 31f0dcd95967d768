"""The open loop's program (cardgen/kinds/openloop), driven directly: seeded Poisson arrivals split over
processes, every request asked for at its time at once. No clock, no socket, no server."""

from __future__ import annotations

import math

from programkit import point_of

from cardgen.kinds.openloop.program import OpenProgram


def test_open_loop_arrivals_are_seeded_poisson_split_over_processes():
    p = point_of(kind="open", rate_rps=4.0, num_requests=2000, seed=3)
    one = OpenProgram(p).arrival_offsets()
    assert one == OpenProgram(p).arrival_offsets() and len(one) == 2000
    assert all(b > a for a, b in zip(one, one[1:], strict=False))
    assert abs(one[-1] / len(one) - 0.25) < 0.02  # mean gap 1 / rate
    halves = [OpenProgram(p, index=i, parts=2).arrival_offsets() for i in range(2)]
    assert [len(h) for h in halves] == [1000, 1000]
    assert abs(halves[0][-1] / 1000 - 0.5) < 0.05  # each process at rate / 2
    burst = point_of(kind="open", rate_rps=math.inf, num_requests=5)
    assert OpenProgram(burst).arrival_offsets() == [0.0] * 5


def test_an_open_loop_asks_for_every_request_at_its_time_at_once():
    p = point_of(kind="open", rate_rps=2.0, num_requests=6, seed=1, prompt_tokens=32, output_tokens=4)
    program = OpenProgram(p, index=1, parts=2)
    sends = program.start()
    assert [s.at for s in sends] == program.arrival_offsets()
    assert all(s.scheduled and s.rate_rps == 2.0 and s.slot is None for s in sends)
    assert program.stop == "complete"  # it has nothing more to decide
