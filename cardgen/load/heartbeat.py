"""run.json's heartbeat while a load runs: re-signed every :data:`HEARTBEAT_S` seconds and soon after a point starts
or ends, so that a reader tells a live run from one killed without a word (``cardgen.rundir.effective_status``)."""

from __future__ import annotations

import time

import gevent
from gevent.event import Event

from cardgen.runwriter import RunWriter

HEARTBEAT_S = 5.0  # how often run.json is re-signed while the load runs


class Heartbeat:
    """While the load runs, re-save run.json every :data:`HEARTBEAT_S` seconds and soon after a point starts or
    ends, so a reader can tell a live run from one killed without a word. The file is written in a thread of
    gevent's pool: an fsync must not stall the event loop that stamps chunk arrivals."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self._dirty = False
        self._stopping = False
        self._wake = Event()
        self._greenlet: gevent.Greenlet[..., None] | None = None

    def changed(self) -> None:
        self._dirty = True

    def _loop(self) -> None:
        pool = gevent.get_hub().threadpool
        last = time.monotonic()
        while not self._stopping:
            self._wake.wait(timeout=0.5)
            if self._stopping:
                return
            if self._dirty or time.monotonic() - last >= HEARTBEAT_S:
                self._dirty, last = False, time.monotonic()
                pool.apply(self.writer.save, (self.writer.info.model_copy(deep=True),))

    def __enter__(self) -> Heartbeat:
        self._greenlet = gevent.spawn(self._loop)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop after a save in progress (never kill it: a late save would overwrite the final run.json)."""
        self._stopping = True
        self._wake.set()
        if self._greenlet is not None:
            self._greenlet.join()
            self._greenlet = None
