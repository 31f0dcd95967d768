"""A modelled build on two cores: the run is computed in a forked process while this one writes its lines and
makes them its card's rows as they come.

A run in virtual time spends a third of its time on what follows from its lines, not on computing them: writing
``requests.jsonl`` and ``server_metrics.jsonl`` (two gigabytes for the planner's suite), and making each record
a row of the card's frame and each scrape columns of the held scrapes. :func:`compute_beside` forks; the child
computes the run with :class:`HandedLines` as its recorder's :class:`~cardgen.recorder.Lines` (each line handed
to this process through a pipe, in order), and this process appends them to the files, as the recorder would,
and reads each as a reader of the file would (the card is rendered from what a reader of the files holds).

    this process (the scribe)                          the child (the run)
      compute_beside(compute, run_dir, ...)  -- fork -->  compute(HandedLines): the run, its run.json
      appends each line to its file          <-- R, S, G  a record's, a scrape's, a sample's line
      every line before it written; "ok"     <-- F, C     before run.json says a point ended; the session closed
      returns compute's result (or raises    <-- E        what compute returned, or the exception it raised
      what it raised)

What is kept whatever ends the run:
- Ctrl-C reaches both processes; this one ignores it while the child runs, so that it writes every line the child
  handed over, while the child's run takes it between two events of its clock (:mod:`.interrupts`: never while a
  message is on its way, which would leave this process reading the next from its middle), ends as an interrupted
  run ends (its files closed, run.json "interrupted") and raises :class:`KeyboardInterrupt`, raised here.
- The child killed: every line it handed over is written, then one error says so. Lines go over in batches of
  :data:`_BATCH` bytes (a write for each cost the run a tenth of its time), so the last of them may be lost with
  the child; never one of a point run.json says ended (its lines are handed over and written before it says so).
- A line this process cannot write (a full disk): it stops reading, the child's next line fails with the same
  error (its run ends there), and the error is raised here.

Where ``fork`` is not available or the machine has one core the build computes its run in its own process, as
before (:func:`usable`).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import signal
import struct
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from cardgen.errors import RunError
from cardgen.forked import can_fork, cores
from cardgen.recorder import ScrapeLine
from cardgen.rundir import RunDir
from cardgen.schemas.records import MetricSample, RequestRecord, WrittenScrapes, decode_line
from cardgen.sim.metrics import LineFormat, Scraped

T = TypeVar("T")

REQUEST, LAYOUT, SCRAPE, LOADGEN, SYNC, CLOSE, RESULT = b"R", b"L", b"S", b"G", b"F", b"C", b"E"
_HEAD = struct.Struct("<cI")  # a message: its tag, its payload's length in bytes
# a scrape: t, t_end, its layout's number (-1: none), its number of values (NO_VALUES: none), how its line comes
# (FROM_VALUES: written here from the values by its layout's LineFormat, WHOLE: with its whole format; else given)
_SCRAPE = struct.Struct("<ddiIB")
_NUMBER = struct.Struct("<i")
NO_VALUES = 0xFFFFFFFF
FROM_VALUES, WHOLE = 1, 2
_OK = b"ok\n"
_PIPE_BYTES = 1 << 20  # asked of the kernel for the pipe (Linux: F_SETPIPE_SZ, up to pipe-max-size)
_F_SETPIPE_SZ = 1031
# a read that brought less than this is followed by a nap: the child hands a line over every few microseconds, and
# a process woken for each would spend more on waking than on writing (the pipe holds a second's lines at most)
_SMALL_READ, _NAP_S = 1 << 16, 0.001
_BATCH = 1 << 16  # bytes of messages written to the pipe at a time


def usable() -> bool:
    """A second process is worth starting: ``fork`` is there and this process may run on two cores or more."""
    return cores() >= 2 and can_fork()


class HandedLines:
    """The child's :class:`~cardgen.recorder.Lines`: each line handed to the scribe through ``data_fd`` as it
    comes (a blocking write: when the scribe falls behind, the run waits), its answers read from ``answer_fd``."""

    def __init__(self, data_fd: int, answer_fd: int) -> None:
        self._data, self._answers = data_fd, answer_fd
        self._layouts: dict[int, tuple[int, object]] = {}  # id(layout) -> (its number, itself: kept alive)
        self._out = bytearray()  # the messages not yet written to the pipe, whole
        self.closed = False

    def request(self, line: str) -> None:
        self.send(REQUEST, line.encode())

    def loadgen(self, line: str) -> None:
        self.send(LOADGEN, line.encode())

    def scrape(self, scrape: ScrapeLine) -> None:
        """A scrape of the virtual server goes as its values, and its layout's formats the first time: the scribe
        writes its line (a tenth of the bytes, and the formatting off this core); any other as its line."""
        values, layout = scrape.values, scrape.layout
        # the formats that write its line from its values, where it is one the virtual server made so
        formats = (scrape.layout.written if isinstance(scrape, Scraped) and scrape.text is None
                   and scrape.layout is not None else None)
        number, how, line = -1, 0, b""
        if values is not None and layout is not None:
            known = self._layouts.get(id(layout))
            if known is None:
                known = self._layouts[id(layout)] = (len(self._layouts), layout)
                if formats is not None:
                    self.send(LAYOUT, _NUMBER.pack(known[0]) + pickle.dumps(formats))
            number = known[0]
        if formats is not None:
            how = FROM_VALUES | (WHOLE if isinstance(scrape, Scraped) and scrape.whole else 0)
        else:
            line = scrape.line.encode()
        packed = b"" if values is None else array("d", values).tobytes()
        count = NO_VALUES if values is None else len(values)
        t_end = math.nan if scrape.t_end is None else scrape.t_end  # none (a scrape read back): NaN, never a time
        self.send(SCRAPE, _SCRAPE.pack(scrape.t, t_end, number, count, how) + packed + line)

    def sync(self) -> None:
        self.send(SYNC, b"", answered=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.send(CLOSE, b"", answered=True)

    def send(self, tag: bytes, payload: bytes, *, answered: bool = False) -> None:
        """One message, and its answer where it has one. Messages go through the pipe :data:`_BATCH` bytes at
        a time (a write for each line cost the run a tenth of its time), each whole; one that is answered, and
        the result, go at once with every message before them."""
        try:
            self._out += _HEAD.pack(tag, len(payload))
            self._out += payload
            if answered or tag == RESULT or len(self._out) >= _BATCH:
                self._flush()
            if answered:
                self._answer()
        except BrokenPipeError:
            raise OSError(self._reason()) from None

    def _flush(self) -> None:
        """Every message not yet written, written (a signal may cut a write short: the rest follows)."""
        data, self._out = bytes(self._out), bytearray()
        view = memoryview(data)
        while view:
            view = view[os.write(self._data, view):]

    def _answer(self) -> None:
        answer = _read_line(self._answers)
        if answer != _OK:
            raise OSError(answer.decode(errors="replace").strip() or "the process writing the run's files ended")

    def _reason(self) -> str:
        """Why the scribe stopped reading (what it said, if it could)."""
        said = _read_line(self._answers).decode(errors="replace").strip()
        return said or "the process writing the run's files ended"


def _read_line(fd: int) -> bytes:
    """Bytes from ``fd`` up to and with a newline (fewer where it ends first)."""
    out = bytearray()
    while not out.endswith(b"\n"):
        piece = os.read(fd, 4096)
        if not piece:
            break
        out += piece
    return bytes(out)


class Scribe:
    """This process's side: appends the lines handed over to the run's files (each message's lines written
    before the next read, every file flushed), each record told to ``on_record`` as a reader of the file reads it,
    each scrape held as a reader holds it (``hold``) ... until the child's result comes."""

    def __init__(self, run_dir: Path, *, on_record: Callable[[RequestRecord], None] | None, hold: bool) -> None:
        files = RunDir(run_dir)
        self._paths = {REQUEST: files.requests_jsonl, SCRAPE: files.server_metrics_jsonl,
                       LOADGEN: files.loadgen_jsonl}
        self._files: dict[bytes, IO[bytes]] = {}
        self._pending: dict[bytes, list[bytes]] = {REQUEST: [], SCRAPE: [], LOADGEN: []}
        self._on_record = on_record
        self.held = WrittenScrapes() if hold else None
        self._layouts: dict[int, object] = {}
        self.result: tuple[bool, object] | None = None  # (returned, what) once the child said

    def serve(self, data_fd: int, answer_fd: int) -> None:
        """Read and write until the child's pipe ends."""
        buffer = bytearray()
        while True:
            piece = os.read(data_fd, _PIPE_BYTES)
            if not piece:
                break
            buffer += piece
            view, at = memoryview(buffer), 0
            while len(buffer) - at >= _HEAD.size:
                tag, size = _HEAD.unpack_from(buffer, at)
                end = at + _HEAD.size + size
                if end > len(buffer):
                    break
                self._take(tag, view[at + _HEAD.size:end], answer_fd)
                at = end
            view.release()
            del buffer[:at]
            self._write()
            if len(piece) < _SMALL_READ:  # little came: let more gather than wake for each line
                time.sleep(_NAP_S)
        self._write()

    def _take(self, tag: bytes, payload: memoryview, answer_fd: int) -> None:
        if tag == REQUEST:
            line = bytes(payload)
            self._pending[REQUEST].append(line)
            if self._on_record is not None:
                self._on_record(RequestRecord.model_validate(decode_line(line)))
        elif tag == LAYOUT:
            (number,) = _NUMBER.unpack_from(payload)
            self._layouts[number] = pickle.loads(payload[_NUMBER.size:])
        elif tag == SCRAPE:
            t, t_end, number, count, how = _SCRAPE.unpack_from(payload)  # NaN: none (WrittenScrapes holds it so)
            start = _SCRAPE.size + (0 if count == NO_VALUES else 8 * count)
            values = None
            if count != NO_VALUES:
                values = array("d")
                values.frombytes(payload[_SCRAPE.size:start])
            layout = self._layouts.get(number) if number >= 0 else None
            if how & FROM_VALUES:
                assert isinstance(layout, LineFormat) and values is not None
                line = layout.line(t, t_end, values, whole=bool(how & WHOLE)).encode()
            else:
                line = bytes(payload[start:])
            self._pending[SCRAPE].append(line)
            if self.held is not None:
                if number >= 0 and layout is None:  # a layout whose formats were not needed here
                    layout = self._layouts[number] = object()
                self.held.add(line, t=t, t_end=t_end, values=values, layout=layout)
        elif tag == LOADGEN:
            self._pending[LOADGEN].append(bytes(payload))
        elif tag in (SYNC, CLOSE):
            self._write()
            if tag == CLOSE:
                self.close()
            os.write(answer_fd, _OK)
        elif tag == RESULT:
            self.result = pickle.loads(payload)
        else:
            raise RuntimeError(f"an unknown message from the run's process: {tag!r}")

    def _write(self) -> None:
        """The lines taken since the last write, appended to their files and flushed."""
        for tag, lines in self._pending.items():
            if lines:
                fh = self._files.get(tag)
                if fh is None:
                    fh = self._files[tag] = self._paths[tag].open("ab")
                fh.write(b"".join(lines))
                fh.flush()
                lines.clear()

    def close(self) -> None:
        files, self._files = list(self._files.values()), {}
        for fh in files:
            fh.close()


def compute_beside(compute: Callable[[HandedLines], T], run_dir: Path, *,
                   on_record: Callable[[RequestRecord], None] | None = None,
                   hold_scrapes: bool = False) -> tuple[T, list[MetricSample] | None]:
    """``compute(lines)`` in a forked process, the lines it hands over written to ``run_dir``'s files here (each
    record also told to ``on_record``, every scrape held where ``hold_scrapes``): what it returned, with the held
    scrapes. What it raised is raised here; a child that ends without an answer raises :class:`RunError`."""
    data_r, data_w = os.pipe()
    answer_r, answer_w = os.pipe()
    with contextlib.suppress(OSError):
        import fcntl  # noqa: PLC0415  POSIX only, as fork is

        fcntl.fcntl(data_w, _F_SETPIPE_SZ, _PIPE_BYTES)
    scribe = Scribe(run_dir, on_record=on_record, hold=hold_scrapes)
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # before the fork: no Ctrl-C in between is lost
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(data_r)
        os.close(answer_w)
        signal.signal(signal.SIGINT, interrupt)  # as this process took it (the run takes it between two events)
        _child(compute, HandedLines(data_w, answer_r))
    os.close(data_w)
    os.close(answer_r)
    failed: BaseException | None = None
    try:
        scribe.serve(data_r, answer_w)
    except BaseException as exc:  # the files could not be written: the child's next line fails and ends its run
        failed = exc
        with contextlib.suppress(OSError):
            os.close(data_r)
            data_r = -1
            os.write(answer_w, f"the run's lines could not be written: {type(exc).__name__}: {exc}\n".encode())
    finally:
        signal.signal(signal.SIGINT, interrupt)
        if data_r >= 0:
            os.close(data_r)
        os.close(answer_w)
        _, status = os.waitpid(pid, 0)
        scribe.close()
    if failed is not None:
        raise failed
    if scribe.result is None:
        how = (f"was killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exited with {os.waitstatus_to_exitcode(status)}")
        raise RunError(f"the process computing the run {how} before it ended: every line it handed over is in "
                       f"{run_dir} (its last {_BATCH // 1024} KB of lines at most were not yet handed over); "
                       "run.json says where it stopped")
    returned, what = scribe.result
    if not returned:
        assert isinstance(what, BaseException)
        raise what
    held = scribe.held.held() if scribe.held is not None else None
    return what, held  # type: ignore[return-value]  # what compute returned, through pickle


def _child(compute: Callable[[HandedLines], T], lines: HandedLines) -> None:
    """Run ``compute`` and hand its result (or what it raised) over; never returns (``os._exit``: the parent's
    exit handlers and buffers are its own)."""
    code = 0
    try:
        outcome: tuple[bool, object] = (True, compute(lines))
    except BaseException as exc:
        outcome = (False, exc)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C from here on would cut the result short: the run is over
    try:
        payload = pickle.dumps(outcome)
        pickle.loads(payload)  # what cannot be read back there is put in words here
    except Exception as exc:
        payload = pickle.dumps((False, RunError(f"the run's process ended with what cannot be handed over: "
                                                f"{type(outcome[1]).__name__}: {outcome[1]} ({exc})")))
    try:
        lines.send(RESULT, payload)
    except OSError:
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
