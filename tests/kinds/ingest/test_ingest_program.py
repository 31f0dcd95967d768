"""The ingestion sweep's program (cardgen/kinds/ingest), driven directly: it stops once its slope is known.
No clock, no socket, no server."""

from __future__ import annotations

from programkit import point_of, record_of, sends_in

from cardgen.kinds.ingest.program import IngestProgram


def test_an_ingestion_sweep_stops_once_its_slope_is_known_and_says_how_well():
    point = point_of(kind="ingest", lengths=[100, 200, 400, 800], repeats=5, target_ci=0.05, output_tokens=1)
    program = IngestProgram(point)
    (send,) = program.start()
    t = 0.0
    while send is not None:
        rec = record_of(send, sent=t, ttft=0.01 + send.prompt_tokens * 1e-4, duration=0.02 + send.prompt_tokens * 1e-4)
        t += 1.0
        nxt = sends_in(program.ended(send, rec, t))
        send = nxt[0] if nxt else None
    assert program.stop == "precision reached" and program.issued == 4  # an exact line: one sweep
    assert program.detail == "the slope +-0.0% after 1 sweep (target +-5%)"
