"""When a chunk counts as arrived, and when an open-loop request leaves.

Reads on plain sockets carry the kernel's receive stamp (SO_TIMESTAMPNS): a client whose event loop is held up
still times every chunk when it reached the host. Open-loop sends wake on a timerfd alarm (not libev's
millisecond poll), and stream reads make way for a send that is due (``SENDS``)."""

from __future__ import annotations

import random
import socket
import threading
import time

import gevent
import pytest
from gevent.monkey import get_original
from test_transport import SSE_HEAD, chunk, serving

from cardgen.load import alarm
from cardgen.load.transport import KERNEL_STAMPS, Connection, SendSchedule, Target, body_reads

# the client's timing fidelity: receive stamps and the send alarm, on real sockets and the real clock
pytestmark = pytest.mark.sockets

blocking_sleep = get_original("time", "sleep")


@pytest.mark.skipif(not KERNEL_STAMPS, reason="receive stamps are Linux's (SO_TIMESTAMPNS)")
def test_a_chunk_is_timed_when_it_arrived_even_while_the_client_was_busy():
    sent: list[tuple[float, float]] = []  # the server's stamps just before and just after each chunk's send

    def paced(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD)
        for i in range(3):
            time.sleep(0.1)
            before = time.time()
            conn.sendall(chunk(b'data: {"choices":[{"text":"%d"}]}\n\n' % i))
            sent.append((before, time.time()))
        conn.sendall(b"0\r\n\r\n")
        return True

    def hog() -> None:  # the event loop held up from ~70 to ~150 ms: the first chunk arrives meanwhile
        gevent.sleep(0.07)
        blocking_sleep(0.08)

    with serving(paced) as server:
        busy = gevent.spawn(hog)
        ex = Connection(Target.from_url(f"http://127.0.0.1:{server.port}", {})).post("/v1/completions", b"{}",
                                                                                      timeout_s=5)
        busy.join()
    pieces = body_reads(ex)
    assert ex.status == 200 and len(pieces) == 3
    # judged against the server's own stamps of each send: on loopback the bytes reach this host's socket within
    # the sender's send call, so a stamp of their arrival lies between the server's stamps before and after it
    # (0.5 ms for the clocks' reads), however late the client reads them; a stamp taken when read would put the
    # first chunk ~50 ms late (at the end of the hold-up), after the server's send had returned
    assert all(b - 0.0005 < t < a + 0.0005 for (t, _), (b, a) in zip(pieces, sent, strict=True)), (pieces, sent)
    assert ex.sent_at < ex.headers_at <= pieces[0][0]


def test_the_alarm_wakes_every_sleeper_at_or_after_its_time_in_order():
    start = time.time() + 0.03
    targets = [start + i * 0.002 for i in range(25)]
    shuffled = random.Random(7).sample(targets, len(targets))
    woke: list[tuple[float, float]] = []

    def sleeper(at: float) -> None:
        alarm.sleep_until(at)
        woke.append((at, time.time()))

    gevent.joinall([gevent.spawn(sleeper, at) for at in shuffled])
    assert [at for at, _ in woke] == targets
    assert all(now >= at for at, now in woke)


def test_a_killed_sleeper_does_not_disturb_the_others():
    t = time.time()
    woke: list[str] = []

    def sleeper(name: str, at: float) -> None:
        alarm.sleep_until(at)
        woke.append(name)

    first = gevent.spawn(sleeper, "first", t + 0.03)
    second = gevent.spawn(sleeper, "second", t + 0.06)
    gevent.idle()  # both have started and wait on the alarm
    first.kill()
    second.join(timeout=2)
    assert woke == ["second"]
    alarm.sleep_until(time.time() - 1)  # a time already past returns at once


def test_reads_make_way_only_for_a_send_that_is_due_and_not_for_long():
    s = SendSchedule()
    assert not s.send_due(100.0)
    s.add(100.0)
    s.add(100.02)
    assert not s.send_due(99.999)  # not yet due
    assert s.send_due(100.0) and s.send_due(100.03)
    assert not s.send_due(100.001 + SendSchedule.MAX_DEFER_S)  # a sender that never came holds nothing back
    s.remove(100.0)
    assert not s.send_due(100.01) and s.send_due(100.02)
    s.remove(100.02)
    s.remove(100.02)  # twice is harmless
    assert not s.due


def test_a_stream_still_completes_while_a_send_stays_due():
    """A due entry nobody removes (a sender killed between its wait and its removal) delays reads by at most
    ``MAX_DEFER_S`` past its time, never stalls them."""
    from cardgen.load.transport import SENDS

    def quick(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD + chunk(b'data: {"choices":[{"text":"a"}]}\n\n') + b"0\r\n\r\n")
        return True

    at = time.time()
    SENDS.add(at)
    try:
        with serving(quick) as server:
            ex = Connection(Target.from_url(f"http://127.0.0.1:{server.port}", {})).post("/v1/completions", b"{}",
                                                                                          timeout_s=5)
    finally:
        SENDS.remove(at)
    assert ex.status == 200 and ex.kind is None and len(body_reads(ex)) == 1


def test_the_alarm_falls_back_to_gevent_sleep_without_timerfd(monkeypatch):
    monkeypatch.setattr(alarm, "_alarm", None)
    monkeypatch.setattr(alarm, "_alarm_failed", True)
    at = time.time() + 0.02
    alarm.sleep_until(at)
    assert time.time() >= at


def test_the_alarm_is_one_per_process_and_reused():
    alarm.sleep_until(time.time() + 0.001)
    first = alarm._alarm
    alarm.sleep_until(time.time() + 0.001)
    assert first is alarm._alarm
    if threading.current_thread() is threading.main_thread() and alarm.sys.platform == "linux":
        assert first is not None and first.fd >= 0


def test_work_that_holds_the_loop_waits_for_a_send_about_to_leave():
    s = SendSchedule()
    s.wait_clear(0.001)  # nothing scheduled: at once
    soon = time.time() + 0.02
    s.add(soon)
    gevent.spawn_later(0.03, s.remove, soon)  # its sender leaves (a little late)
    s.wait_clear(0.05)
    assert time.time() >= soon and not s.due
    later = time.time() + 5
    s.add(later)
    t = time.time()
    s.wait_clear(0.001)  # not within the room: at once
    overdue = SendSchedule()
    overdue.add(time.time() - 1)
    overdue.wait_clear(0.001)  # overdue past MAX_DEFER_S (its sender never came): holds nothing
    assert time.time() - t < 1  # neither waits for the 5 s send or the overdue one: 1 s of margin for the loop


def test_work_waiting_for_a_due_send_lets_the_loop_poll_for_its_alarm(monkeypatch):
    # the sender sleeps on the alarm (a timerfd, seen only when the loop polls) and the send falls due while a
    # parser is busy; the parser then waits for it in wait_clear. Yielding with sleep(0) kept the loop running
    # callbacks without polling until their budget ran out (the switch interval; in a run 5 ms: 4-6 ms late sends
    # at 400 req/s). Here the budget is 10 s and the parser gives up on a send only 5 s overdue, so the order tells,
    # whatever the machine's pace: the send must leave while the parser waits for it, before wait_clear returns
    # (with sleep(0) the parser gave up first, and the sender left after it)
    monkeypatch.setattr(alarm, "_alarm", None)  # a fresh alarm on this loop
    monkeypatch.setattr(alarm, "_alarm_failed", alarm.sys.platform != "linux")
    monkeypatch.setattr(SendSchedule, "MAX_DEFER_S", 5.0)
    s = SendSchedule()
    at = time.time() + 0.02
    s.add(at)
    order: list[str] = []

    def sender() -> None:
        alarm.sleep_until(at)
        order.append("sent")
        s.remove(at)

    def parser() -> None:
        blocking_sleep(0.025)  # busy past the send's time: it is due, its alarm not yet seen
        s.wait_clear(0.001)
        order.append("cleared")

    old = alarm.sys.getswitchinterval()
    alarm.sys.setswitchinterval(10.0)  # the loop's callback budget (gevent's is Python's): 5 ms would hide it
    try:
        gevent.joinall([gevent.spawn(sender), gevent.spawn(parser)], timeout=30)
    finally:
        alarm.sys.setswitchinterval(old)
    assert order == ["sent", "cleared"]
