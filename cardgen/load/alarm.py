"""Waking a greenlet at an exact wall-clock time: an open loop's sends leave when they are scheduled.

gevent's timers ride libev's poll, whose timeout is whole milliseconds rounded up (``epoll_wait``): a greenlet
sleeping until ``t`` wakes anywhere in ``[t, t + 1 ms]``, later when the loop is busy. On Linux one ``timerfd``
(``timerfd_create(2)``, CLOCK_REALTIME, the clock of ``time.time()``) armed at the earliest wanted time wakes the
poll to the microsecond instead: its watcher has the loop's highest priority, so in the loop iteration where it
fires it runs before any stream read, and it switches straight into each greenlet whose time came. Elsewhere
(or without ``timerfd``) :func:`sleep_until` falls back to gevent's sleep.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import os
import sys
import time

import gevent
from gevent.hub import Waiter, get_hub

_CLOCK_REALTIME = 0
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_PRIORITY = 2  # libev's highest


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class Alarm:
    """One ``timerfd`` per process (per event loop) and the greenlets waiting on it, earliest first."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._settime = libc.timerfd_settime
        self.fd = libc.timerfd_create(_CLOCK_REALTIME, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        hub = get_hub()
        self.io = hub.loop.io(self.fd, 1)
        self.io.priority = _PRIORITY  # type: ignore[attr-defined]  # libev's watchers have it: not in the stubs
        self.waiting: list[tuple[float, int, Waiter[None]]] = []
        self.armed: float | None = None
        self.order = itertools.count()
        self.hub = hub

    def sleep_until(self, at: float) -> None:
        if at <= time.time():
            return
        waiter: Waiter[None] = Waiter(self.hub)
        heapq.heappush(self.waiting, (at, next(self.order), waiter))
        if self.armed is None or at < self.armed:
            self._arm(at)
        if not self.io.active:  # type: ignore[attr-defined]  # libev's watchers have it: not in the stubs
            self.io.start(self._fired)
        waiter.get()

    def _arm(self, at: float) -> None:
        sec = int(at)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((at - sec) * 1e9)))
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed = at

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed = None
        now = time.time()
        waiting = self.waiting
        due = []
        while waiting and waiting[0][0] <= now:
            due.append(heapq.heappop(waiting)[2])
        if waiting:
            self._arm(waiting[0][0])
        else:
            self.io.stop()
        for waiter in due:
            waiter.switch(None)


_alarm: Alarm | None = None
_alarm_failed = sys.platform != "linux"


def sleep_until(at: float) -> None:
    """Return at wall-clock time ``at`` (``time.time()``), letting other greenlets run meanwhile."""
    global _alarm, _alarm_failed
    if _alarm is None and not _alarm_failed:
        try:
            _alarm = Alarm()
        except (OSError, AttributeError):
            _alarm_failed = True
    if _alarm is not None:
        _alarm.sleep_until(at)
        return
    while (delay := at - time.time()) > 0:
        gevent.sleep(delay)
