"""``--low-latency``: the load generator's CPUs kept out of their idle states while it sends.

An idle CPU halts, and a send timed to the microsecond (:mod:`cardgen.load.alarm`) waits for its CPU to wake. On
bare metal that is the idle state's exit latency; on a virtual machine (every cloud GPU) the hypervisor must first
run the halted vCPU again, which takes it from tens of microseconds to milliseconds. Measured on this project's
2-core VM (a Firecracker guest, cpuidle's ``haltpoll`` driver with no halt polling), a process doing nothing but
sleeping until Poisson-spaced times at 400 per second woke p50 0.14 ms, p99 2.1 ms late; with the CPUs held out of
idle, p50 0.07 ms, p99 0.12 ms. One worker process's open-loop send lag follows (``make bench``, bench_worker).

Linux's PM QoS does it: while a process holds ``/dev/cpu_dma_latency`` open with 0 written to it, no CPU enters an
idle state whose exit latency is above 0 us; they poll instead (what ``cyclictest`` does by default, and tuned's
``latency-performance`` profile). The kernel drops the request when the file is closed, so also when the process
dies: nothing is left behind. It is the machine's, not the process's: a server on the same machine runs with its
CPUs held awake too, and idle CPUs draw their busy power. Hence a flag, and said in run.json and on the card.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from cardgen.errors import one_line

DEVICE = Path("/dev/cpu_dma_latency")
HELD, NOT_HELD = "held awake: ", "not held awake: "  # how :attr:`CpusAwake.words` begins


def why_not_held(words: str | None) -> str | None:
    """Why the CPUs were not held awake, from a hold's ``words`` (None: held, or not asked)."""
    return words.removeprefix(NOT_HELD) if words is not None and words.startswith(NOT_HELD) else None


def not_held_warnings(where: Iterable[tuple[str, str | None]]) -> list[str]:
    """run.json's warnings for each ``(where, words)`` whose hold was asked for and not had."""
    return [f"--low-latency could not hold {who}'s CPUs awake: {why}; its sends left as late as an idle CPU woke"
            for who, words in where if (why := why_not_held(words)) is not None]


class CpusAwake:
    """The hold: ``open`` it (``asked`` False: nothing is done), ``close`` it; ``words`` says what came of it."""

    def __init__(self, asked: bool, *, device: Path = DEVICE) -> None:
        self.asked = asked
        self.device = device
        self.fd: int | None = None
        self.words: str | None = None  # None: not asked

    @property
    def held(self) -> bool:
        return self.fd is not None

    def open(self) -> CpusAwake:
        if not self.asked or self.fd is not None:
            return self
        try:
            fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            why = ("it needs root" if isinstance(exc, PermissionError)
                   else "this kernel has no PM QoS device" if isinstance(exc, FileNotFoundError)
                   else f"{type(exc).__name__}: {one_line(exc)}")
            self.words = f"{NOT_HELD}{self.device} could not be opened ({why})"
            return self
        try:
            os.write(fd, struct.pack("=i", 0))  # the most exit latency allowed, in microseconds: none
        except OSError as exc:
            os.close(fd)
            self.words = f"{NOT_HELD}writing {self.device} failed ({type(exc).__name__}: {one_line(exc)})"
            return self
        self.fd = fd
        self.words = f"{HELD}{self.device} at 0 us while the load ran"
        return self

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the kernel drops the request with the file
            self.fd = None

    def __enter__(self) -> CpusAwake:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
