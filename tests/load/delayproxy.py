"""A TCP proxy whose answers arrive late: every byte the server sends reaches the client ``DELAY`` seconds after the
proxy read it, the bytes' spacing kept (a delay line, as a longer path to the server would be). What the client
sends goes on at once. For a load worker whose path to the server is slower than the others'
(tests/load/test_netns.py); it stops when its parent test's namespace goes.

    python tests/load/delayproxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_S
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time


def _pump_now(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _pump_late(src: socket.socket, dst: socket.socket, delay: float) -> None:
    line: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def write() -> None:
        try:
            while True:
                due, data = line.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        while data := src.recv(65536):
            line.put((time.monotonic() + delay, data))
    except OSError:
        pass
    line.put((time.monotonic() + delay, b""))


def main(listen_host: str, listen_port: int, target_host: str, target_port: int, delay: float) -> None:
    server = socket.create_server((listen_host, listen_port), reuse_port=False)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((target_host, target_port))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump_now, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pump_late, args=(upstream, client, delay), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
