"""The closed loop's program (cardgen/kinds/closed), driven directly: its users, quota and cap split over
processes, when it stops, and its judge of precision. No clock, no socket, no server."""

from __future__ import annotations

from programkit import point_of, record_of, sends_in

from cardgen.kinds import judge_for
from cardgen.kinds.closed.program import ClosedProgram
from cardgen.kinds.program import Send


def test_closed_loop_shares_users_quota_and_cap_over_processes():
    p = point_of(parallel=4, min_requests=10)
    assert [ClosedProgram(p, index=i, parts=3).users for i in range(3)] == [2, 1, 1]
    assert [ClosedProgram(p, index=i, parts=3).quota for i in range(3)] == [4, 3, 3]
    capped = point_of(parallel=4, min_requests=10, max_requests=30)
    assert ClosedProgram(capped, index=0, parts=2).cap == 15 and ClosedProgram(p).cap is None
    one = point_of(parallel=1, min_requests=12, max_requests=20)  # the quota goes only to processes with users
    assert [(ClosedProgram(one, index=i, parts=2).users, ClosedProgram(one, index=i, parts=2).quota,
             ClosedProgram(one, index=i, parts=2).cap) for i in range(2)] == [(1, 12, 20), (0, 0, 0)]
    three = point_of(parallel=3, min_requests=10)
    assert [ClosedProgram(three, index=i, parts=4).quota for i in range(4)] == [4, 3, 3, 0]


def test_closed_loop_stops_at_quota_and_duration_and_never_past_max_duration():
    p = point_of(parallel=4, min_requests=10, min_duration_s=2.0, max_duration_s=5.0)
    program = ClosedProgram(p)
    program.issued = 9
    assert program.continues(3.0)
    program.issued = 10
    assert program.continues(1.0)  # quota met, duration not yet
    assert not program.continues(2.0)
    program.issued = 0
    assert not program.continues(5.0)
    assert program.why_stopped(5.0) == ("max_duration", None)


def test_a_closed_loop_with_a_target_runs_until_told_precise_or_its_cap():
    program = ClosedProgram(point_of(parallel=2, min_requests=4, max_requests=12, target_ci=0.03))
    first = program.start()
    assert [(s.slot, s.parallel) for s in sends_in(first)] == [(0, 2), (1, 2)]
    t, sends = 0.0, sends_in(first)
    for _ in range(3):  # past the minimum, still no precision: each user sends again
        t += 1.0
        sends = [n for s in sends for n in sends_in(program.ended(s, record_of(s, sent=t - 1), t))]
        assert [s.slot for s in sends] == [0, 1]
    program.told_precise()
    assert program.ended(sends[0], record_of(sends[0], sent=t), t + 1) == []
    assert program.stop == "precision reached"
    assert program.ended(sends[1], record_of(sends[1], sent=t), t + 1) == [] and program.issued == 8
    capped = ClosedProgram(point_of(parallel=1, min_requests=1, max_requests=3, target_ci=0.03))
    (send,) = capped.start()
    while (nxt := sends_in(capped.ended(send, record_of(send, sent=0), 1.0))):
        send = nxt[0]
    assert capped.issued == 3 and capped.stop == "max_requests"


def test_the_closed_judge_finds_a_steady_point_precise_once_a_round_after_the_minimum():
    point = point_of(parallel=2, min_requests=10, target_ci=0.05)
    judge = judge_for(point)
    said = []
    for i in range(40):
        send = Send(prompt_tokens=64, output_tokens=16)
        said.append(judge.record(record_of(send, sent=i * 0.5, duration=1.0), i * 0.5 + 1.0))
        if said[-1]:
            break
    assert said.count(True) == 1 and judge.requests >= 10 and judge.requests % 2 == 0
    assert judge.detail("precision reached", None).startswith("speed from start +-0.0%, TTFT +-0.0% over ")
    plain = judge_for(point_of(parallel=2, min_requests=10, min_duration_s=3.0))
    assert plain.detail("minimum reached", None) == "min_requests 10 and min_duration_s 3 reached"


def test_the_judges_keep_compact_columns_and_judge_as_the_records_would():
    """Issue 40: a judge keeps numbers, not a record a request; its median speed and its closed figures are those
    of the records themselves (sorted by send with ``sorted``, the median by ``statistics``), whatever the order
    they ended in."""
    import statistics

    from cardgen.outcome import RequestFigures
    from cardgen.precision import running_steady_mask, warmup_requests

    records = [record_of(Send(prompt_tokens=64, output_tokens=16), sent=(i // 4) * 0.7 + 0.01 * (i % 4),
                         ttft=0.1 + 0.01 * (i % 7), duration=1.0 + 0.1 * (i % 5), ok=i % 11 != 3)
               for i in range(400)]
    ended = sorted(records, key=lambda r: r.end_at)
    judge = judge_for(point_of(parallel=4, min_requests=100_000, target_ci=0.05))  # kept, never judged
    plain = judge_for(point_of(parallel=4, min_requests=10))
    for r in ended:
        judge.record(r, r.end_at - records[0].sent_at)
        plain.record(r, r.end_at - records[0].sent_at)
    assert not hasattr(judge, "done") and len(plain.figures.sent) == 0  # no target: nothing kept for precision
    figures = [(r.sent_at, RequestFigures.of(r)) for r in ended]
    speeds_all = [f.speed_from_start_tok_s for _, f in figures if f.ok]
    assert judge.median_speed_tok_s() == plain.median_speed_tok_s() == statistics.median(speeds_all)
    done = sorted(((s, f) for s, f in figures if f.ok), key=lambda item: item[0])
    mask = running_steady_mask([s for s, _ in done], [f.end_at for _, f in done])
    kept = [f for (_, f), keep in zip(done, mask, strict=True) if keep]
    kept = kept[:len(kept) - len(kept) % 4]
    speeds, ttfts = [f.speed_from_start_tok_s for f in kept], [f.ttft_s for f in kept]
    cut = warmup_requests([speeds, ttfts], parallel=4)
    assert judge.figures.figures(parallel=4) == (speeds[cut:], ttfts[cut:]) and len(speeds) > 300
