"""The record sink: where every finished request goes, in every load-generating process.

Locust's HTTP session only fires the ``request`` event (the record rides in ``context["record"]``); the sink
is its subscriber, in the local process and in each worker alike, and ``deliver`` takes the record on: to
the recorder's file locally, to the master from a worker. Locust swallows exceptions raised in listeners,
which would lose the record and let the run succeed, so the sink never lets one escape: it keeps the first
failure and reports it, once, through ``on_fatal`` (which stops the run locally and tells the master on a
worker). The run then fails with the number of records that did reach the disk.

A test breaks the record path on purpose with ``CARDGEN_FAULT_RECORD_AT=N``: delivery of each process's
Nth record raises.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cardgen.errors import one_line
from cardgen.schemas.records import RequestRecord

FAULT_ENV = "CARDGEN_FAULT_RECORD_AT"


def fault_from_env() -> int | None:
    """The record number (1-based) whose delivery must fail, from ``CARDGEN_FAULT_RECORD_AT``; None normally."""
    value = os.environ.get(FAULT_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


class RecordSink:
    """Subscribe :meth:`on_request` to Locust's ``request`` event; ``deliver`` may raise, the sink never does."""

    def __init__(self, deliver: Callable[[RequestRecord], None], *, on_fatal: Callable[[str], None],
                 fail_at: int | None = None) -> None:
        self.deliver = deliver
        self.on_fatal = on_fatal
        self.fail_at = fail_at
        self.seen = 0
        self.delivered = 0
        self.fatal: str | None = None

    def on_request(self, *, context: dict[str, Any] | None = None, **_: Any) -> None:
        """Locust's ``request`` listener (its other keyword arguments are Locust's statistics, unused here)."""
        self.seen += 1
        try:
            record = (context or {}).get("record")
            if not isinstance(record, RequestRecord):
                raise TypeError("a request reached the record sink without its record")
            if self.seen == self.fail_at:
                raise RuntimeError(f"fault injected by {FAULT_ENV}={self.fail_at}")
            self.deliver(record)
        except Exception as exc:  # fail loudly, see the module docstring
            self.fail(f"record {self.seen}: {type(exc).__name__}: {one_line(exc)}")
            return
        self.delivered += 1

    def fail(self, reason: str) -> None:
        """Keep the first failure and report it once."""
        if self.fatal is None:
            self.fatal = reason
            self.on_fatal(reason)
