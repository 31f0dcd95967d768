"""A Ctrl-C a run in virtual time takes between two events of its clock, never in the middle of one.

Python's own SIGINT handler raises :class:`KeyboardInterrupt` at whatever line runs when the signal comes. A
modelled run spends much of its time writing lines, and a line is made by pydantic-core, which calls back into
Python (a record's chunk times are a field serializer): a :class:`KeyboardInterrupt` raised there comes out as a
``PydanticSerializationError``, and the run ended as an internal error (exit 70, run.json still "running")
instead of an interrupted run (exit 130, run.json "interrupted", resumable). So while :func:`at_safe_points`
holds, a Ctrl-C is only noted; the virtual clock raises it before its next event (:data:`HEARD`, read once an
event), where the run's state is whole: every line written and tallied, and nothing half made.

The load engine's runs take theirs as the load engine does (:mod:`cardgen.load.runner`: a stop flag).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Heard:
    """Whether a Ctrl-C came and was not raised yet (``noted``: read by the clock's loop, once an event)."""

    __slots__ = ("noted",)

    def __init__(self) -> None:
        self.noted = False

    def note(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler while :func:`at_safe_points` holds."""
        self.noted = True

    def raise_noted(self) -> None:
        """:class:`KeyboardInterrupt` where a Ctrl-C was noted (once)."""
        if self.noted:
            self.noted = False
            raise KeyboardInterrupt


HEARD = Heard()


@contextlib.contextmanager
def at_safe_points() -> Iterator[None]:
    """While inside, a Ctrl-C is noted in :data:`HEARD`, not raised where it lands; one noted and not yet raised
    is raised as this ends (where nothing else is on its way out). Where SIGINT is ignored (a process in the
    background of a shell) it stays ignored; where Python's handler is not the one in place (a handler of the
    caller's own), or outside the main thread (where no handler can be set), nothing changes. Nested: the
    outermost holds."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    HEARD.noted = False
    signal.signal(signal.SIGINT, HEARD.note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    HEARD.raise_noted()  # reached only where nothing was raised inside
