"""Each scenario program, driven directly: what it asks to send, given what came back. No clock, no socket,
no server: a request "ends" when the test says so, at the time the test says."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest

from cardgen.kinds import judge_for, program_for, runs_on
from cardgen.kinds.batch.program import BatchProgram
from cardgen.kinds.batch.schema import BatchParams
from cardgen.kinds.chat.program import ChatProgram
from cardgen.kinds.chat.schema import ChatParams
from cardgen.kinds.closed.program import ClosedProgram
from cardgen.kinds.closed.schema import ClosedParams
from cardgen.kinds.history import Conversations
from cardgen.kinds.ingest.program import IngestProgram
from cardgen.kinds.ingest.schema import IngestParams
from cardgen.kinds.openloop.program import OpenProgram
from cardgen.kinds.openloop.schema import OpenParams
from cardgen.kinds.prefix.program import PHASE_PAUSE_S, PrefixProgram
from cardgen.kinds.prefix.schema import PrefixParams
from cardgen.kinds.program import EndWatch, Send, Verdict, Watch
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.kinds.waves.program import WaveSearch, WavesProgram
from cardgen.kinds.waves.schema import WavesParams
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord

PARAMS = {p.kind: p for p in (ClosedParams(), OpenParams(), WavesParams(), IngestParams(), BatchParams(),
                                PrefixParams(), ChatParams(), SloParams())}
HEADER = {f.name for f in fields(Point)}


def _point(kind: str = "closed", **kw) -> Point:
    """A point of ``kind``: the header's fields of ``kw`` on the point, the others on its kind's params."""
    own = {k: kw.pop(k) for k in list(kw) if k not in HEADER}
    base = dict(name="p", group="g", endpoint="completions", timeout_s=10.0)
    return Point(**{**base, **kw}, params=replace(PARAMS[kind], **own))


def _record(send: Send, *, sent: float, ttft: float = 0.1, duration: float = 1.0, ok: bool = True,
            ) -> RequestRecord:
    """A record of ``send`` as if the server answered it: first token ``ttft`` after ``sent``, the last
    ``duration`` after it, ``output_tokens`` tokens."""
    n = send.output_tokens
    end = sent + duration
    return RequestRecord(scenario="p", kind="closed", prompt_tokens_target=send.prompt_tokens,
                         output_tokens_target=n, sent_at=sent, first_token_at=sent + ttft, end_at=end,
                         chunk_times=[sent + ttft + (duration - ttft) * i / max(n - 1, 1) for i in range(n)],
                         output_tokens=n, prompt_tokens=send.prompt_tokens, status=200 if ok else 500,
                         error=None if ok else "HTTP 500", error_kind=None if ok else "http_status")


def _sends(commands) -> list[Send]:
    return [c for c in commands if isinstance(c, Send)]


# -- closed loop ------------------------------------------------------------------------------------------------


def test_closed_loop_shares_users_quota_and_cap_over_processes():
    p = _point(parallel=4, min_requests=10)
    assert [ClosedProgram(p, index=i, parts=3).users for i in range(3)] == [2, 1, 1]
    assert [ClosedProgram(p, index=i, parts=3).quota for i in range(3)] == [4, 3, 3]
    capped = _point(parallel=4, min_requests=10, max_requests=30)
    assert ClosedProgram(capped, index=0, parts=2).cap == 15 and ClosedProgram(p).cap is None
    one = _point(parallel=1, min_requests=12, max_requests=20)  # the quota goes only to processes with users
    assert [(ClosedProgram(one, index=i, parts=2).users, ClosedProgram(one, index=i, parts=2).quota,
             ClosedProgram(one, index=i, parts=2).cap) for i in range(2)] == [(1, 12, 20), (0, 0, 0)]
    three = _point(parallel=3, min_requests=10)
    assert [ClosedProgram(three, index=i, parts=4).quota for i in range(4)] == [4, 3, 3, 0]


def test_closed_loop_stops_at_quota_and_duration_and_never_past_max_duration():
    p = _point(parallel=4, min_requests=10, min_duration_s=2.0, max_duration_s=5.0)
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
    program = ClosedProgram(_point(parallel=2, min_requests=4, max_requests=12, target_ci=0.03))
    first = program.start()
    assert [(s.slot, s.parallel) for s in _sends(first)] == [(0, 2), (1, 2)]
    t, sends = 0.0, _sends(first)
    for _ in range(3):  # past the minimum, still no precision: each user sends again
        t += 1.0
        sends = [n for s in sends for n in _sends(program.ended(s, _record(s, sent=t - 1), t))]
        assert [s.slot for s in sends] == [0, 1]
    program.told_precise()
    assert program.ended(sends[0], _record(sends[0], sent=t), t + 1) == []
    assert program.stop == "precision reached"
    assert program.ended(sends[1], _record(sends[1], sent=t), t + 1) == [] and program.issued == 8
    capped = ClosedProgram(_point(parallel=1, min_requests=1, max_requests=3, target_ci=0.03))
    (send,) = capped.start()
    while (nxt := _sends(capped.ended(send, _record(send, sent=0), 1.0))):
        send = nxt[0]
    assert capped.issued == 3 and capped.stop == "max_requests"


def test_the_closed_judge_finds_a_steady_point_precise_once_a_round_after_the_minimum():
    point = _point(parallel=2, min_requests=10, target_ci=0.05)
    judge = judge_for(point)
    said = []
    for i in range(40):
        send = Send(prompt_tokens=64, output_tokens=16)
        said.append(judge.record(_record(send, sent=i * 0.5, duration=1.0), i * 0.5 + 1.0))
        if said[-1]:
            break
    assert said.count(True) == 1 and judge.requests >= 10 and judge.requests % 2 == 0
    assert judge.detail("precision reached", None).startswith("speed from start +-0.0%, TTFT +-0.0% over ")
    plain = judge_for(_point(parallel=2, min_requests=10, min_duration_s=3.0))
    assert plain.detail("minimum reached", None) == "min_requests 10 and min_duration_s 3 reached"


# -- open loop ----------------------------------------------------------------------------------------------------


def test_open_loop_arrivals_are_seeded_poisson_split_over_processes():
    p = _point(kind="open", rate_rps=4.0, num_requests=2000, seed=3)
    one = OpenProgram(p).arrival_offsets()
    assert one == OpenProgram(p).arrival_offsets() and len(one) == 2000
    assert all(b > a for a, b in zip(one, one[1:], strict=False))
    assert abs(one[-1] / len(one) - 0.25) < 0.02  # mean gap 1 / rate
    halves = [OpenProgram(p, index=i, parts=2).arrival_offsets() for i in range(2)]
    assert [len(h) for h in halves] == [1000, 1000]
    assert abs(halves[0][-1] / 1000 - 0.5) < 0.05  # each process at rate / 2
    burst = _point(kind="open", rate_rps=math.inf, num_requests=5)
    assert OpenProgram(burst).arrival_offsets() == [0.0] * 5


def test_an_open_loop_asks_for_every_request_at_its_time_at_once():
    p = _point(kind="open", rate_rps=2.0, num_requests=6, seed=1, prompt_tokens=32, output_tokens=4)
    program = OpenProgram(p, index=1, parts=2)
    sends = program.start()
    assert [s.at for s in sends] == program.arrival_offsets()
    assert all(s.scheduled and s.rate_rps == 2.0 and s.slot is None for s in sends)
    assert program.stop == "complete"  # it has nothing more to decide


# -- waves ------------------------------------------------------------------------------------------------------------


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
        wave = _sends(commands)
        sizes.append(len(wave))
        commands = []
        for send in wave:
            commands = program.ended(send, _record(send, sent=0), 1.0)
        if commands == [EndWatch()]:
            commands = program.watched(Verdict(saturated=readable and len(wave) > capacity, readable=readable), 1.0)
    return sizes


def test_waves_bisect_to_the_saturating_size_and_say_so():
    program = WavesProgram(_point(kind="waves", max_wave=20, search="bisect", prompt_tokens=8, output_tokens=4))
    assert _run_waves(program, capacity=10) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (program.stop, program.detail) == ("saturated", "between waves of 10 and 11")


def test_stepped_waves_stop_at_the_first_that_saturates_or_say_why_they_could_not_tell():
    step = _point(kind="waves", max_wave=7, step=3, search="step", prompt_tokens=8, output_tokens=4)
    assert WavesProgram(step).wave_sizes() == [1, 4, 7]
    stopped = WavesProgram(step)
    assert _run_waves(stopped, capacity=3) == [1, 4] and stopped.detail == "wave of 4"
    blind = WavesProgram(step)
    assert _run_waves(blind, capacity=3, readable=False) == [1, 4, 7]
    assert blind.detail == "saturation unknown: the server's /metrics did not answer"
    unwatched = WavesProgram(_point(kind="waves", max_wave=4, search="step", stop_at_saturation=False,
                                    prompt_tokens=8, output_tokens=4))
    assert not any(isinstance(c, Watch) for c in unwatched.start())
    assert _run_waves(WavesProgram(unwatched.point), capacity=0) == [1, 2, 3, 4]
    calm = WavesProgram(step)
    _run_waves(calm, capacity=100)
    assert (calm.stop, calm.detail) == ("complete", "no wave up to 7 saturated the server")


# -- ingestion, batch, prefix, chat ------------------------------------------------------------------------------


def test_ingestion_batch_and_prefix_orders():
    assert IngestProgram(_point(kind="ingest", lengths=[16, 32], repeats=2)).ingest_order() == [
        (16, 0), (32, 0), (16, 1), (32, 1)]
    assert BatchProgram(_point(kind="batch", warmups=1, runs=2)).batch_rounds() == [(0, True), (0, False), (1, False)]
    prefix = PrefixProgram(_point(kind="prefix", prefixes=2, warm_rounds=2))
    assert prefix.prefix_order() == [(0, "cold"), (1, "cold"), (0, "warm"), (1, "warm"), (0, "warm"), (1, "warm")]
    assert [prefix.pause_before(n) for n in range(4)] == [PHASE_PAUSE_S, 0.0, PHASE_PAUSE_S, 0.0]
    for kind in ("batch", "ingest", "waves", "prefix", "chat"):
        assert runs_on(_point(kind=kind), 0) and not runs_on(_point(kind=kind), 1)
    assert runs_on(_point(kind="closed"), 1) and runs_on(_point(kind="open"), 3)


def test_sweeps_and_batch_rounds_with_and_without_a_target():
    plain = IngestProgram(_point(kind="ingest", lengths=[16, 32], repeats=3))
    assert [plain.more_sweeps(n, precise=True) for n in range(4)] == [True, True, True, False]
    aimed = IngestProgram(_point(kind="ingest", lengths=[16, 32], repeats=3, target_ci=0.03))
    assert aimed.more_sweeps(0, precise=True) and not aimed.more_sweeps(1, precise=True)
    assert aimed.more_sweeps(1, precise=False) and not aimed.more_sweeps(3, precise=False)
    batch = BatchProgram(_point(kind="batch", runs=3, target_ci=0.03, max_runs=5))
    assert batch.more_rounds(2, precise=True) and not batch.more_rounds(3, precise=True)
    assert batch.more_rounds(4, precise=False) and not batch.more_rounds(5, precise=False)
    assert not BatchProgram(_point(kind="batch", runs=3)).more_rounds(3, precise=False)


def test_an_ingestion_sweep_stops_once_its_slope_is_known_and_says_how_well():
    point = _point(kind="ingest", lengths=[100, 200, 400, 800], repeats=5, target_ci=0.05, output_tokens=1)
    program = IngestProgram(point)
    (send,) = program.start()
    t = 0.0
    while send is not None:
        rec = _record(send, sent=t, ttft=0.01 + send.prompt_tokens * 1e-4, duration=0.02 + send.prompt_tokens * 1e-4)
        t += 1.0
        nxt = _sends(program.ended(send, rec, t))
        send = nxt[0] if nxt else None
    assert program.stop == "precision reached" and program.issued == 4  # an exact line: one sweep
    assert program.detail == "the slope +-0.0% after 1 sweep (target +-5%)"


def test_a_batch_point_sends_whole_rounds_each_after_the_last():
    program = BatchProgram(_point(kind="batch", parallel=3, warmups=1, runs=2, prompt_tokens=8, output_tokens=4))
    rounds, commands = [], program.start()
    while commands:
        wave = _sends(commands)
        rounds.append([(s.slot, s.repeat, s.warmup) for s in wave])
        for i, send in enumerate(wave):
            commands = program.ended(send, _record(send, sent=0), 1.0)
            assert commands == [] or i == len(wave) - 1  # the next round only once the last request ended
    assert rounds == [[(k, 0, True) for k in range(3)], [(k, 0, False) for k in range(3)],
                      [(k, 1, False) for k in range(3)]]
    assert program.stop == "complete"


def test_chat_users_hold_their_conversations_and_a_failed_turn_ends_one():
    point = _point(kind="chat", endpoint="chat", parallel=2, conversations=3, turns=2, prompt_tokens=64,
                   message_tokens=16, think_time_s=0.5, output_tokens=8)
    program = ChatProgram(point)
    assert [program.conversations(u) for u in (0, 1)] == [[0, 2], [1]]
    first = program.start()
    assert [(s.slot, s.conversation, s.turn, s.prompt_tokens, s.at) for s in first] == [
        (0, 0, 1, 64, None), (1, 1, 1, 64, None)]
    (second,) = program.ended(first[0], _record(first[0], sent=0), 1.0)
    assert (second.conversation, second.turn, second.prompt_tokens, second.at) == (0, 2, 16, 1.5)
    (next_conversation,) = program.ended(second, _record(second, sent=1.5), 2.5)  # the last turn: the next one
    assert (next_conversation.conversation, next_conversation.turn, next_conversation.at) == (2, 1, None)
    assert program.ended(first[1], _record(first[1], sent=0, ok=False), 1.0) == []  # failed: user 1 has no more
    assert program.ended(next_conversation, _record(next_conversation, sent=2.5, ok=False), 3.0) == []
    assert program.stop == "complete" and program.issued == 4


def test_every_kind_has_a_program_and_a_judge():
    own = {"ingest": {"lengths": [16, 32]}, "prefix": {"prefixes": 1}, "chat": {"conversations": 1, "turns": 1}}
    for kind in ("closed", "open", "waves", "ingest", "batch", "prefix", "chat"):
        point = _point(kind=kind, parallel=1, **own.get(kind, {}))
        assert program_for(point).kind == kind and judge_for(point).point is point


def test_one_chat_history_rule_for_both_interpreters():
    def turn(conversation: int, n: int) -> Send:
        return Send(prompt_tokens=10, output_tokens=5, conversation=conversation, turn=n)

    chats: Conversations[str] = Conversations(fresh=False)
    assert chats.ask(turn(0, 1), "q1", renew=str.upper) == ["q1"]
    chats.answered(turn(0, 1), "a1")
    assert chats.ask(turn(0, 2), "q2", renew=str.upper) == ["q1", "a1", "q2"]
    chats.answered(turn(0, 2), None)  # failed: nothing goes on the history
    assert chats.ask(turn(0, 3), "q3", renew=str.upper) == ["q1", "a1", "q3"]
    assert chats.ask(turn(1, 1), "other", renew=str.upper) == ["other"]  # conversations apart
    assert chats.ask(turn(0, 1), "again", renew=str.upper) == ["again"]  # a first turn starts afresh
    fresh: Conversations[str] = Conversations(fresh=True)
    fresh.ask(turn(0, 1), "q1", renew=lambda m: "id " + m)
    fresh.answered(turn(0, 1), "a1")
    assert fresh.ask(turn(0, 2), "q2", renew=lambda m: "id " + m) == ["id q1", "a1", "q2"]
