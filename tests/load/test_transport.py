"""The load engine's HTTP/1.1 read path (cardgen.load.transport) against a raw socket server with every fault
it must survive: chunked streams, keep-alive, bodies with a length, refused and reset connections, stalls,
broken framing, and HTTPS with a self-signed certificate made here.

Only gevent's socket module is used (no monkey-patching); the server runs in real threads."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cardgen.load.transport import Connection, Target, body_reads, body_text
from cardgen.schemas.records import ErrorKind

# the transport against a raw socket server: stalls, timeouts and resets are timed on real sockets
pytestmark = pytest.mark.sockets

Handler = Callable[[socket.socket, bytes], bool]  # (connection, request head+body) -> keep the connection open


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"b"}]}\n\n', b"data: [DONE]\n\n"]


class RawServer:
    """Accepts connections; for each request read, calls the handler. Counts connections and keeps requests."""

    def __init__(self, handler: Handler, *, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls = handler, tls
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self._closed = threading.Condition()
        self.closed = 0  # connections the server has closed
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            while True:
                data = b""
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                if not self.handler(conn, head):
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()
            with self._closed:
                self.closed += 1
                self._closed.notify_all()

    def wait_closed(self, n: int, *, timeout_s: float = 5.0) -> None:
        """Until the server has closed ``n`` connections."""
        with self._closed:
            assert self._closed.wait_for(lambda: self.closed >= n, timeout=timeout_s), self.closed

    def close(self) -> None:
        self.sock.close()


@contextmanager
def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    server = RawServer(handler, tls=tls)
    try:
        yield server
    finally:
        server.close()


EVENT_GAP_S = 0.05  # the server's pause before each event: the stream comes in pieces, not all at once


def stream_events(conn: socket.socket, head: bytes, sent: list[float] | None = None) -> bool:
    """The three :data:`EVENTS` as a chunked stream, each after a pause; ``sent`` gets the time (``time.time``,
    the clock of the client's stamps) just before each event's chunk is sent."""
    conn.sendall(SSE_HEAD)
    for event in EVENTS:
        time.sleep(EVENT_GAP_S)
        if sent is not None:
            sent.append(time.time())
        conn.sendall(chunk(event))
    conn.sendall(b"0\r\n\r\n")
    return True


def acked(conn: socket.socket, *, timeout_s: float = 5.0) -> None:
    """Until the peer's host has acknowledged every byte sent on ``conn`` (the send queue is empty: SIOCOUTQ)."""
    import fcntl
    import struct

    deadline = time.monotonic() + timeout_s
    while struct.unpack("i", fcntl.ioctl(conn.fileno(), 0x5411, b"\0" * 4))[0] > 0:  # TIOCOUTQ == SIOCOUTQ
        assert time.monotonic() < deadline, "the client never acknowledged the data"
        time.sleep(0.001)


def post(server: RawServer, *, timeout_s: float = 5.0, conn: Connection | None = None,
         headers: dict[str, str] | None = None, scheme: str = "http"):
    conn = conn or Connection(Target.from_url(f"{scheme}://127.0.0.1:{server.port}", headers or {}))
    return conn, conn.post("/v1/completions", b'{"x":1}', timeout_s=timeout_s)


def sent_by(pieces: list[tuple[float, bytes]], events: list[bytes]) -> list[int]:
    """For each read piece, the index of the last event any of its bytes belongs to."""
    ends = [sum(len(e) for e in events[:i + 1]) for i in range(len(events))]
    last, read = [], 0
    for _, piece in pieces:
        read += len(piece)
        last.append(next(i for i, end in enumerate(ends) if read <= end))
    return last


def test_a_chunked_stream_is_read_stamped_and_decoded_and_the_connection_kept():
    sent: list[float] = []
    with serving(lambda conn, head: stream_events(conn, head, sent)) as server:
        conn, ex = post(server, headers={"Authorization": "Bearer sk-test"})
        assert (ex.status, ex.kind, ex.error) == (200, None, None)
        pieces = body_reads(ex)
        assert b"".join(p for _, p in pieces) == b"".join(EVENTS)
        times = [t for t, _ in pieces]
        # stamped as they came, judged against the server's own send stamps (a fixed span between the reads
        # failed on a busy CI, where a reader held up read two events at once): the first read is stamped before
        # the last event was sent (the stream was read as it came, not whole at its end), and no read before the
        # last event in it was sent (same host, same clock: a stamp is the bytes' arrival, never earlier)
        assert len(sent) == len(EVENTS) and times == sorted(times) and times[0] < sent[-1]
        assert all(t > sent[i] - 0.0005 for t, i in zip(times, sent_by(pieces, EVENTS), strict=True))
        assert ex.sent_at <= ex.headers_at <= times[0] <= ex.end_at
        _, again = post(server, conn=conn)
        assert again.status == 200 and again.reused and server.connections == 1
        first = server.requests[0]
        assert b"Authorization: Bearer sk-test\r\n" in first and first.endswith(b'{"x":1}')
        assert first.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")


def test_an_http_error_with_a_body_of_known_length():
    def fail(conn: socket.socket, head: bytes) -> bool:
        body = b'{"error": {"message": "model not found"}}'
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                     % (len(body), body))
        return True

    with serving(fail) as server:
        conn, ex = post(server)
        assert ex.status == 404 and ex.kind is None and "model not found" in body_text(ex)
        _, again = post(server, conn=conn)
        assert again.status == 404 and server.connections == 1  # the body was read whole: the connection is reused


def test_connection_refused_is_a_connect_failure():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    ex = Connection(Target.from_url(f"http://127.0.0.1:{port}", {})).post("/v1/completions", b"{}", timeout_s=2)
    assert ex.kind == ErrorKind.CONNECT and ex.status is None and "Refused" in ex.error


def test_no_answer_within_the_timeout_is_a_timeout():
    released, held = threading.Event(), []

    def hold(conn: socket.socket, head: bytes) -> bool:  # no answer until the test is done
        held.append(released.wait(10))  # True: the test let go, so the client had returned first
        return False

    with serving(hold) as server:
        _, ex = post(server, timeout_s=0.3)
        released.set()
        server.wait_closed(1)
    # the client gave up on its own 0.3 s timeout, while the server still held the connection (judged by the
    # server's own hold, where a fixed bound on the time taken is one a busy machine can pass): it waited its
    # timeout at least (a busy machine only lengthens that), and returned before the server let go
    assert ex.kind == ErrorKind.TIMEOUT and ex.status is None and held == [True]
    assert ex.end_at - ex.sent_at >= 0.3


def test_a_stream_that_stalls_is_a_timeout_with_what_came_before_kept():
    released, held = threading.Event(), []

    def stall(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD + chunk(EVENTS[0]))
        held.append(released.wait(10))  # the stall, held until the test is done: True once the test let go
        return False

    with serving(stall) as server:
        _, ex = post(server, timeout_s=0.3)
        released.set()
        server.wait_closed(1)
    # the client gave up on its own 0.3 s read timeout, not on the stall's end: it returned while the server still
    # stalled (the server's own account, as above), and waited its timeout at least
    assert ex.kind == ErrorKind.TIMEOUT and ex.status == 200 and held == [True]
    assert b"".join(p for _, p in body_reads(ex)) == EVENTS[0]
    assert ex.end_at - ex.sent_at >= 0.3


def test_a_stream_past_the_request_deadline_is_a_timeout():
    def slow(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD)
        for _ in range(40):
            conn.sendall(chunk(EVENTS[0]))
            time.sleep(0.05)
        return False

    with serving(slow) as server:
        _, ex = post(server, timeout_s=0.5)  # no gap is that long, but the whole stream is
        assert ex.kind == ErrorKind.TIMEOUT and "request timeout" in ex.error


@pytest.mark.parametrize("ending", [b"", b"0\r\n"])  # closed mid-stream; closed inside the last chunk
def test_a_connection_closed_mid_stream_is_a_dropped_stream(ending: bytes):
    def drop(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD + chunk(EVENTS[0]) + ending)
        acked(conn)  # the client's host has every byte: then the reset
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        return False

    with serving(drop) as server:
        _, ex = post(server)
        assert ex.kind == ErrorKind.STREAM_DROPPED and ex.status == 200
        assert b"".join(p for _, p in body_reads(ex)) == EVENTS[0]


def test_broken_chunk_framing_is_a_dropped_stream():
    released = threading.Event()

    def broken(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD + chunk(EVENTS[0]) + b"zz\r\nnot a chunk\r\n\r\n")
        released.wait(10)  # the connection stays open: the framing alone must end the read
        return False

    with serving(broken) as server:
        _, ex = post(server)
        released.set()
        assert ex.kind == ErrorKind.STREAM_DROPPED and "chunk" in ex.error


def test_a_kept_connection_the_server_closed_is_replaced_once():
    def once(conn: socket.socket, head: bytes) -> bool:
        stream_events(conn, head)
        return False  # the server closes every connection after one response, without saying so

    with serving(once) as server:
        conn, first = post(server)
        server.wait_closed(1)  # the server has closed the kept connection
        _, second = post(server, conn=conn)
        assert first.status == second.status == 200 and second.kind is None
        assert server.connections == 2 and len(server.requests) == 2


def test_a_body_that_ends_when_the_server_closes():
    def close_delimited(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(EVENTS))
        return False

    with serving(close_delimited) as server:
        _, ex = post(server)
        assert ex.status == 200 and ex.kind is None
        assert b"".join(p for _, p in body_reads(ex)) == b"".join(EVENTS)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_with_a_certificate_the_client_trusts(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with serving(stream_events, tls=tls) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        conn, ex = post(server, scheme="https", headers={"Authorization": "Bearer sk-test"})
        assert (ex.status, ex.kind) == (200, None)
        assert b"".join(p for _, p in body_reads(ex)) == b"".join(EVENTS)
        _, again = post(server, conn=conn, scheme="https")
        assert again.status == 200 and server.connections == 1
        assert b"Authorization: Bearer sk-test" in server.requests[0]


def test_https_with_an_untrusted_certificate_fails_to_connect(tmp_path):
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with serving(stream_events, tls=tls) as server:
        _, ex = post(server, scheme="https")
        assert ex.kind == ErrorKind.CONNECT and "CERTIFICATE_VERIFY_FAILED" in ex.error and not server.requests


def test_trailers_after_the_last_chunk_are_read_and_the_connection_kept():
    def with_trailers(conn: socket.socket, head: bytes) -> bool:
        conn.sendall(SSE_HEAD + b"".join(chunk(e) for e in EVENTS) + b"0\r\nX-Usage: 3\r\n")
        time.sleep(0.02)
        conn.sendall(b"\r\n")
        return True

    with serving(with_trailers) as server:
        conn, ex = post(server)
        assert ex.kind is None and b"".join(p for _, p in body_reads(ex)) == b"".join(EVENTS)
        _, again = post(server, conn=conn)
        assert again.kind is None and again.reused and server.connections == 1


def test_a_host_name_is_resolved_once_per_target(monkeypatch):
    import gevent.socket

    calls = []
    real = gevent.socket.getaddrinfo
    monkeypatch.setattr(gevent.socket, "getaddrinfo", lambda *a, **k: calls.append(a) or real(*a, **k))
    with serving(stream_events) as server:
        target = Target.from_url(f"http://localhost:{server.port}", {})
        if target.address[0] != socket.AF_INET:
            pytest.skip("localhost does not resolve to IPv4 here; the server listens on 127.0.0.1")
        for _ in range(3):  # three connections: each request on a fresh one
            ex = Connection(target).post("/v1/completions", b"{}", timeout_s=5)
            assert ex.status == 200 and ex.kind is None
        assert len(calls) == 1 and server.connections == 3
