"""HTTP/1.1 streaming on gevent sockets: the load engine's read path, as cheap per chunk as Python allows.

The clock that matters is when a chunk's bytes arrived: on plain sockets under Linux the kernel stamps it
(``SO_TIMESTAMPNS`` below), elsewhere the read does. The CPU spent per chunk decides how many streams one
process can keep up with (a batching server answers all of them in the same instant). A general HTTP client (requests + urllib3, ~22 us per chunk) wraps every read in layers of
buffering, decoding and checks; here, while a response streams, each network read costs one wait on the
socket's watcher, one ``recvmsg`` (the bytes and the kernel's stamp of their arrival, see ``SO_TIMESTAMPNS``
below) and one ``append``. Everything else (the chunked framing,
the SSE events, JSON) is undone after the stream ended (:func:`body_reads`, then ``cardgen.load.sse``).

A :class:`Connection` is one keep-alive connection (plain or TLS) that sends one request at a time; it
reconnects when the server closed it and, when a reused connection turns out dead before any byte came back,
resends once on a fresh one (as every HTTP client does). Failures are never raised: :meth:`Connection.post`
returns an :class:`Exchange` that says what happened (``error`` / ``kind``) and keeps what was read.

Only what OpenAI-compatible servers answer is supported: ``Transfer-Encoding: chunked``, ``Content-Length``,
or a body that ends when the server closes the connection; no compression (``Accept-Encoding: identity``).
"""

from __future__ import annotations

import ipaddress
import socket as _stdsocket
import ssl
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent import socket
from gevent import ssl as gevent_ssl
from gevent.hub import Waiter, get_hub

from cardgen.load.alarm import sleep_until
from cardgen.schemas.records import ErrorKind

READ_SIZE = 1 << 16
MAX_HEAD_BYTES = 1 << 16
_END_CANDIDATE = b"\r\n\r\n"  # a read that ends the chunked body ends so (the last chunk, then no trailers)

# Linux's receive timestamps (socket(7) SO_TIMESTAMPNS): the kernel stamps each packet (CLOCK_REALTIME, the clock
# of time.time()) when it reaches this host, and recvmsg hands over the stamp of the last packet a read took. A
# read's time is then when its bytes arrived, not when this process got round to reading them: a busy event loop
# (hundreds of streams answered in the same instant, an open loop's sends) no longer moves the stamps. Python
# does not name the constants; these are asm-generic's (x86-64, arm64), where a timespec is two 64-bit fields.
SO_TIMESTAMPNS = 35  # = SCM_TIMESTAMPNS
KERNEL_STAMPS = sys.platform == "linux"
_ANC_SIZE = _stdsocket.CMSG_SPACE(16) if KERNEL_STAMPS else 0
_TIMESPEC = struct.Struct("qq").unpack_from


class SendSchedule:
    """The open loop's sends still to come, earliest first, that the stream reads make way for.

    A batching server answers hundreds of streams in the same instant, and reading them all takes the event
    loop milliseconds; a request scheduled inside that drain would leave late. Reads are stamped by the kernel
    (their time does not depend on when they are read), so a read finding a send due leaves its bytes in the
    socket for the next loop iteration, where the send's timer runs first (the reads' watchers have a lower
    priority). A send overdue by more than ``MAX_DEFER_S`` no longer holds reads back (a sender that never came
    must not starve them)."""

    MAX_DEFER_S = 0.05

    def __init__(self) -> None:
        self.due: deque[float] = deque()

    def add(self, at: float) -> None:
        self.due.append(at)

    def remove(self, at: float) -> None:
        due = self.due
        if due and due[0] == at:
            due.popleft()
        else:
            try:
                due.remove(at)
            except ValueError:
                pass

    def send_due(self, now: float) -> bool:
        due = self.due
        return bool(due) and 0.0 <= now - due[0] < self.MAX_DEFER_S

    def wait_clear(self, room_s: float) -> None:
        """Return once no send is due within ``room_s``: work that holds the loop that long goes after it.

        A send already due waits for its alarm, which fires only when the loop polls: this waits with
        ``gevent.idle()``, which lets it poll. ``gevent.sleep(0)`` would not: the loop runs the callbacks queued
        while it runs them for up to the switch interval (5 ms) before it polls again, so a parser yielding so
        round and round held every due send back 5 ms (a fifth of the sends at 400 req/s were 4-6 ms late)."""
        due = self.due
        while due and -self.MAX_DEFER_S < (ahead := due[0] - time.time()) < room_s:
            if ahead > 0:
                sleep_until(due[0])
            gevent.idle()  # the loop polls: the sender's alarm fires, and it leaves first


SENDS = SendSchedule()  # one event loop per process, one schedule
READ_PRIORITY = -1  # libev: the reads' watchers run after timers that expired in the same loop iteration


@dataclass(frozen=True)
class Target:
    """Where requests go: scheme, host, port and the headers every request carries (an API key among them)."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    headers: bytes  # the fixed header lines, CRLF-terminated

    @cached_property
    def address(self) -> tuple[int, tuple[Any, ...]]:
        """The server's socket address, resolved once: gevent resolves names in a thread pool, and a thread
        taking the interpreter's lock stalls the event loop that stamps chunks (an open loop opens hundreds of
        connections). Raises OSError when the name does not resolve."""
        try:
            ip = ipaddress.ip_address(self.host)
        except ValueError:
            family, _, _, _, sockaddr = socket.getaddrinfo(self.host, self.port, 0, _stdsocket.SOCK_STREAM)[0]
            return family, sockaddr
        return (_stdsocket.AF_INET6, (str(ip), self.port, 0, 0)) if ip.version == 6 else (_stdsocket.AF_INET,
                                                                                          (str(ip), self.port))

    @classmethod
    def from_url(cls, base_url: str, headers: dict[str, str], *, verify_tls: bool = True) -> Target:
        parts = urlsplit(base_url)
        tls = None
        if parts.scheme == "https":
            tls = gevent_ssl.create_default_context()  # gevent's: its sockets wait cooperatively
            if not verify_tls:
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if tls else 80)
        default_port = 443 if tls else 80
        host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default_port else f":{port}")
        lines = [f"Host: {host_header}", "Content-Type: application/json", "Accept: text/event-stream",
                 "Accept-Encoding: identity", *(f"{k}: {v}" for k, v in headers.items())]
        return cls(host=host, port=port, tls=tls, headers="".join(f"{line}\r\n" for line in lines).encode("latin-1"))


@dataclass
class Exchange:
    """One request and what came back. ``reads`` are the raw network reads of the body (chunked framing
    included) with the time each one was read; :func:`body_reads` gives the body itself."""

    sent_at: float
    status: int | None = None
    headers_at: float | None = None
    chunked: bool = False
    reads: list[tuple[float, bytes]] = field(default_factory=list)
    end_at: float | None = None
    error: str | None = None
    kind: ErrorKind | None = None
    reused: bool = False  # sent on a connection an earlier request had opened
    decoded: list[tuple[float, bytes]] | None = None  # the chunked body's payload, when decoded while reading

    def fail(self, kind: ErrorKind, error: str) -> None:
        if self.kind is None:
            self.kind, self.error = kind, error


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


class Connection:
    """One keep-alive HTTP/1.1 connection to ``target``; one request at a time (one per closed-loop user)."""

    def __init__(self, target: Target, *, connect_timeout_s: float = 10.0) -> None:
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.sock: socket.socket | None = None

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def _connect(self) -> socket.socket:
        t = self.target
        family, sockaddr = t.address
        sock = socket.socket(family, _stdsocket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout_s)
            sock.connect(sockaddr)
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        if t.tls is not None:
            return t.tls.wrap_socket(sock, server_hostname=t.host)
        if KERNEL_STAMPS:
            try:
                sock.setsockopt(_stdsocket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:  # a kernel without it: reads are stamped when read (_stamped_reader's fallback)
                pass
        return sock

    def post(self, path: str, body: bytes, *, timeout_s: float, max_error_body: int = 4096) -> Exchange:
        """POST ``body`` (JSON) to ``path`` and read the whole response, stamping every read. No read may wait
        longer than ``timeout_s``, nor may the whole exchange last longer. Never raises for a server or network
        fault: the exchange says what happened."""
        request = (f"POST {path} HTTP/1.1\r\n".encode("latin-1") + self.target.headers
                   + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
        ex = Exchange(sent_at=time.time())
        try:
            head, rest = self._send(request, ex, timeout_s)
            if head is None and ex.reused:  # the idle connection was dead before any byte came: once more, afresh
                self.close()
                ex = Exchange(sent_at=time.time())
                head, rest = self._send(request, ex, timeout_s)
        except TimeoutError as exc:
            self.close()
            ex.fail(ErrorKind.TIMEOUT, _short(exc))
            ex.end_at = time.time()
            return ex
        except (OSError, ssl.SSLError, ValueError) as exc:
            self.close()
            ex.fail(ErrorKind.CONNECT, _short(exc))
            ex.end_at = time.time()
            return ex
        if head is None:  # the retry's connection was dead too
            self.close()
            ex.fail(ErrorKind.CONNECT, "the server closed the connection before answering")
            ex.end_at = time.time()
            return ex
        keep = self._read_body(ex, head, rest, timeout_s=timeout_s,
                               limit=None if ex.status == 200 else max_error_body)
        if not keep:
            self.close()
        return ex

    def _send(self, request: bytes, ex: Exchange, timeout_s: float) -> tuple[dict[str, str] | None, bytes]:
        """Send the request and read the response head: the status and headers (names lower-cased), and the
        bytes after them; None when a reused connection turned out dead before any byte came back."""
        ex.reused = self.sock is not None
        if self.sock is None:
            self.sock = self._connect()
        sock = self.sock
        sock.settimeout(timeout_s)
        read = _stamped_reader(sock, kernel=self.target.tls is None)
        buf = b""
        try:
            sock.sendall(request)
            data, at = read()
        except (ConnectionError, BrokenPipeError):
            if ex.reused:
                return None, b""
            raise
        while True:
            if not data:
                if buf:
                    raise ConnectionResetError("the connection closed inside the response head")
                if ex.reused:
                    return None, b""
                raise ConnectionResetError("the server closed the connection before answering")
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > MAX_HEAD_BYTES:
                raise ValueError("the response head is larger than 64 KiB")
            data, at = read()
        ex.headers_at = at
        lines = buf[:end].decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not status_line[1].isdigit():
            raise ValueError(f"not an HTTP response: {lines[0][:60]!r}")
        ex.status = int(status_line[1])
        head = {"": status_line[0]}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            head[name.strip().lower()] = value.strip()
        return head, buf[end + 4:]

    def _read_body(self, ex: Exchange, head: dict[str, str], rest: bytes, *, timeout_s: float,
                   limit: int | None) -> bool:
        """Read the body into ``ex.reads``; whether the connection can carry another request."""
        sock = self.sock
        assert sock is not None
        now = time.time
        ex.chunked = "chunked" in head.get("transfer-encoding", "").lower()
        length = head.get("content-length")
        remaining = int(length) if length is not None and length.isdigit() and not ex.chunked else None
        keep = head[""] != "HTTP/1.0" and head.get("connection", "").lower() != "close"
        if ex.status in (204, 304) or 100 <= (ex.status or 0) < 200:  # no body
            ex.end_at = now()
            return keep
        if rest:
            ex.reads.append((ex.headers_at or now(), rest))
        body = _Body(ex, chunked=ex.chunked, length=remaining, limit=limit, deadline=ex.sent_at + timeout_s,
                     timeout_s=timeout_s)
        try:
            verdict = body.take_pending()
            if verdict is None:
                raw = getattr(sock, "_sock", None)
                if raw is not None and self.target.tls is None:
                    verdict = _LoopReader(raw, body, check_s=min(timeout_s, 1.0)).run()
                else:
                    verdict = _read_in_greenlet(sock, body)
        except TimeoutError as exc:
            ex.fail(ErrorKind.TIMEOUT, _short(exc))
            verdict = False
        except OSError as exc:
            ex.fail(ErrorKind.STREAM_DROPPED, _short(exc))
            verdict = False
        except ValueError as exc:  # framing that is not chunked encoding
            ex.fail(ErrorKind.STREAM_DROPPED, f"broken chunked encoding: {exc}")
            verdict = False
        if ex.end_at is None:
            ex.end_at = now()
        return verdict and keep and ex.kind is None


class _Body:
    """What the reads of one body decide: :meth:`take` keeps a read and says whether the body is over (None: read
    on; True: complete; False: over, the connection unusable). Called once per network read: keep it cheap."""

    def __init__(self, ex: Exchange, *, chunked: bool, length: int | None, limit: int | None, deadline: float,
                 timeout_s: float) -> None:
        self.ex = ex
        self.reads = ex.reads
        self.append = ex.reads.append
        self.tracker = _ChunkEnd() if chunked else None
        self.length = length
        self.limit = limit
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.got = sum(len(d) for _, d in ex.reads)

    def take_pending(self) -> bool | None:
        """The verdict on what came with the head."""
        ex = self.ex
        if self.tracker is not None:
            if self.reads and self.tracker.feed_pending(self.reads):
                ex.end_at = self.reads[-1][0]
                ex.decoded = self.tracker.pieces
                return True
            return None
        if self.length is not None and self.got >= self.length:
            ex.end_at = ex.headers_at
            return True
        return None

    def take(self, t: float, data: bytes) -> bool | None:
        if not data:
            self.ex.end_at = t
            if self.tracker is not None or self.length is not None:
                self.ex.fail(ErrorKind.STREAM_DROPPED, "the server closed the connection mid-response")
            return False
        self.append((t, data))
        if t > self.deadline:
            self.ex.end_at = t
            self.ex.fail(ErrorKind.TIMEOUT, f"stream exceeded the {self.timeout_s:g} s request timeout")
            return False
        if self.tracker is not None:
            if (len(data) < 5 or data[-4:] == _END_CANDIDATE) and self.tracker.feed_pending(self.reads):
                self.ex.end_at = t
                self.ex.decoded = self.tracker.pieces
                return True
            if self.limit is None:
                return None
        self.got += len(data)
        if self.length is not None and self.got >= self.length:
            self.ex.end_at = t
            return True
        if self.limit is not None and self.got >= self.limit:  # an error body: enough of it is read
            self.ex.end_at = t
            return False
        return None


def _kernel_time(anc: list[tuple[int, int, bytes]]) -> float | None:
    """The arrival time in a read's ancillary data (SO_TIMESTAMPNS), or None."""
    for level, ctype, data in anc:
        if level == _stdsocket.SOL_SOCKET and ctype == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = _TIMESPEC(data)
            return float(sec + nsec * 1e-9)
    return None


def _stamped_reader(sock: socket.socket, *, kernel: bool) -> Callable[[], tuple[bytes, float]]:
    """A cooperative read and its time: when the bytes arrived (the kernel's stamp) on a plain socket that has
    them, else when the read returned (TLS: the records are decrypted above the socket, so the stamps are lost)."""
    now = time.time
    if kernel and KERNEL_STAMPS:
        recvmsg = sock.recvmsg

        def read_stamped() -> tuple[bytes, float]:
            data, anc, _, _ = recvmsg(READ_SIZE, _ANC_SIZE)
            return data, (_kernel_time(anc) if anc else None) or now()

        return read_stamped
    recv = sock.recv

    def read() -> tuple[bytes, float]:
        data = recv(READ_SIZE)
        return data, now()

    return read


def _read_in_greenlet(sock: socket.socket, body: _Body) -> bool:
    """The body read by this greenlet, one ``recv`` after another (TLS sockets: their records need it)."""
    now = time.time
    recv = sock.recv
    take = body.take
    while True:
        data = recv(READ_SIZE)
        verdict = take(now(), data)
        if verdict is not None:
            return verdict


def _recvmsg(raw: _stdsocket.socket) -> Callable[[int, int], tuple[bytes, list[tuple[int, int, bytes]], int, object]]:
    """``raw.recvmsg``, or on a platform without it a ``recv`` that says so (no ancillary data)."""
    if hasattr(raw, "recvmsg"):
        return raw.recvmsg
    return lambda size, _anc: (raw.recv(size), [], 0, None)


class _LoopReader:
    """The body read from inside gevent's event loop: a watcher on the socket calls a callback for each network
    read, which stamps and keeps it there, and the waiting greenlet is woken once, when the body is over. Per
    chunk that is one callback, one ``recvmsg`` (with the arrival stamp) and one ``append``: no greenlet switch, no
    timeout object (gevent's socket ``recv`` costs both, ~13 us here). A read that may end the body (or breaks
    the deadline) goes to :meth:`_Body.take`. A timer checks every ``check_s`` that no read waited longer than
    the timeout."""

    def __init__(self, raw: _stdsocket.socket, body: _Body, *, check_s: float) -> None:
        self.raw = raw
        self.body = body
        hub = get_hub()
        self.loop = hub.loop
        self.io = hub.loop.io(raw.fileno(), 1)
        try:
            self.io.priority = READ_PRIORITY  # type: ignore[attr-defined]  # libev's watchers have it: not in the stubs
        except (AttributeError, ValueError):  # a loop without priorities (libuv)
            pass
        self.timer = hub.loop.timer(check_s, check_s)
        self.waiter: Waiter[bool] = Waiter(hub)
        self.error: BaseException | None = None
        self.started = time.time()

    def run(self) -> bool:
        body, end = self.body, self._end
        recvmsg, now, append, take = _recvmsg(self.raw), time.time, body.append, body.take
        deadline = body.deadline
        plain = body.tracker is not None and body.limit is None  # a streamed body: only its end is looked for
        anc_size, kernel_time = _ANC_SIZE, _kernel_time
        due, defer = SENDS.due, SENDS.send_due
        kernel = KERNEL_STAMPS

        def readable() -> None:
            if due and kernel and defer(now()):  # an open-loop send is due: it goes first (SendSchedule)
                return
            try:
                data, anc, _, _ = recvmsg(READ_SIZE, anc_size)
            except BlockingIOError:  # a spurious wake-up
                return
            except BaseException as exc:  # handed to the waiting greenlet
                end(None, exc)
                return
            t = (kernel_time(anc) if anc else None) or now()  # when the bytes arrived, else now
            if plain and t <= deadline and len(data) >= 5 and data[-4:] != _END_CANDIDATE:
                append((t, data))
                return
            try:
                verdict = take(t, data)
            except BaseException as exc:
                end(None, exc)
                return
            if verdict is not None:
                end(verdict, None)

        self.io.start(readable)
        self.timer.start(self._check)
        try:
            verdict: bool = self.waiter.get()
        finally:
            self.io.stop()
            self.io.close()
            self.timer.stop()
            self.timer.close()
        if self.error is not None:
            raise self.error
        return verdict

    def _check(self) -> None:
        reads = self.body.reads
        last = reads[-1][0] if reads else self.started
        if time.time() - last > self.body.timeout_s:
            self._end(None, TimeoutError("timed out"))

    def _end(self, verdict: bool | None, error: BaseException | None) -> None:
        """Wake the greenlet, but only after the loop has called every watcher ready now: the reads of other
        streams that came in the same instant are stamped before this one's request is parsed and recorded."""
        self.io.stop()
        self.timer.stop()
        self.error = error
        self.loop.run_callback(self.waiter.switch, bool(verdict))


class _ChunkEnd:
    """Follows the chunked framing of the reads so far, only when a read may have ended the body (so the
    streaming loop pays nothing for it per chunk): :meth:`feed_pending` says whether the last chunk came. The
    payload it decodes on the way is kept (``pieces``): the body is decoded once."""

    def __init__(self) -> None:
        self.done_reads = 0
        self.decoder = _Dechunker()
        self.pieces: list[tuple[float, bytes]] = []

    def feed_pending(self, reads: list[tuple[float, bytes]]) -> bool:
        decoder, append = self.decoder, self.pieces.append
        for at, data in reads[self.done_reads:]:
            payload = decoder.feed(data)
            if payload:
                append((at, payload))
        self.done_reads = len(reads)
        return decoder.finished


class _Dechunker:
    """Incremental ``Transfer-Encoding: chunked`` decoder; raises ValueError on framing it cannot read."""

    def __init__(self) -> None:
        self.buf = b""
        self.need = 0  # payload bytes left in the current chunk
        self.crlf = 0  # bytes of the CRLF after the current chunk's payload still to skip
        self.trailer = False  # the last (empty) chunk came: the trailer section follows
        self.finished = False

    def feed(self, data: bytes, *, keep: bool = True) -> bytes:
        """Decode ``data``; the payload bytes it carried (b"" when ``keep`` is False)."""
        if not (self.buf or self.need or self.crlf or self.trailer):  # the common read: exactly one whole chunk
            eol = data.find(b"\r\n")
            if 0 < eol <= 8:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0  # a chunk extension, or bad framing: the general path says which
                end = eol + 2 + size
                if size and len(data) == end + 2 and data[end:] == b"\r\n":
                    return data[eol + 2:end] if keep else b""
        out: list[bytes] = []
        buf = self.buf + data if self.buf else data
        pos, n = 0, len(buf)
        while pos < n and not self.finished:
            if self.trailer:  # after the last chunk: an empty line, or trailer lines and then one
                if buf.startswith(b"\r\n", pos):
                    self.finished, pos = True, pos + 2
                else:
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        break
                    self.finished, pos = True, end + 4
                continue
            if self.need:
                take = min(self.need, n - pos)
                if keep:
                    out.append(buf[pos:pos + take])
                pos += take
                self.need -= take
                if not self.need:
                    self.crlf = 2
                continue
            if self.crlf:
                skip = min(self.crlf, n - pos)
                pos += skip
                self.crlf -= skip
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:
                    raise ValueError("a chunk-size line longer than 1 KiB")
                break
            size_text = buf[pos:eol].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ValueError(f"bad chunk size {size_text[:20]!r}") from None
            pos = eol + 2
            if size == 0:
                self.trailer = True
                continue
            self.need = size
        self.buf = buf[pos:] if not self.finished else b""
        return b"".join(out)


def body_reads(ex: Exchange) -> list[tuple[float, bytes]]:
    """The response body as (read time, payload bytes) pairs: the chunked framing undone, after the stream."""
    if not ex.chunked:
        return ex.reads
    if ex.decoded is not None:
        return ex.decoded
    decoded = _ChunkEnd()  # the body did not end well: what decodes, up to where the framing breaks
    try:
        decoded.feed_pending(ex.reads)
    except ValueError:
        pass
    return decoded.pieces


def body_text(ex: Exchange) -> str:
    """The body as text (an error's explanation)."""
    return b"".join(p for _, p in body_reads(ex)).decode("utf-8", errors="replace")
