"""Serving a built site on the loopback interface only, with a bounded number of handler threads."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cardgen.errors import UsageError

HOST = "127.0.0.1"
MAX_THREADS = 8


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the base class's name
        pass


class SiteServer(ThreadingHTTPServer):
    """A static file server: at most :data:`MAX_THREADS` requests at once (accepting waits for a slot)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, *, max_threads: int = MAX_THREADS) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_threads)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except Exception:  # the thread never started: its slot is ours to give back (not on Ctrl-C: it may
            self._slots.release()  # have started and released the slot itself; a second release would hide
            raise  # the KeyboardInterrupt behind a ValueError, and the server would go on serving)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"


def make_server(site_dir: Path, *, port: int = 8000) -> SiteServer:
    """A server for ``site_dir`` on 127.0.0.1:``port`` (0 picks a free port); call ``serve_forever()``."""
    if not (Path(site_dir) / "index.html").is_file():
        raise UsageError(f"no built site in {site_dir}: run 'cardgen site' first")
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    try:
        return SiteServer((HOST, port), handler)
    except OSError as exc:
        raise UsageError(
            f"cannot serve on {HOST}:{port} ({exc.strerror or exc}): pass another --port"
        ) from None
