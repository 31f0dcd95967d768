"""The batch program (cardgen/kinds/batch), driven directly: whole rounds, each after the last.
No clock, no socket, no server."""

from __future__ import annotations

from programkit import point_of, record_of, sends_in

from cardgen.kinds.batch.program import BatchProgram


def test_a_batch_point_sends_whole_rounds_each_after_the_last():
    program = BatchProgram(point_of(kind="batch", parallel=3, warmups=1, runs=2, prompt_tokens=8, output_tokens=4))
    rounds, commands = [], program.start()
    while commands:
        wave = sends_in(commands)
        rounds.append([(s.slot, s.repeat, s.warmup) for s in wave])
        for i, send in enumerate(wave):
            commands = program.ended(send, record_of(send, sent=0), 1.0)
            assert commands == [] or i == len(wave) - 1  # the next round only once the last request ended
    assert rounds == [[(k, 0, True) for k in range(3)], [(k, 0, False) for k in range(3)],
                      [(k, 1, False) for k in range(3)]]
    assert program.stop == "complete"
