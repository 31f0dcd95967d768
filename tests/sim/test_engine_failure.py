"""A broken engine loop stops the virtual server and says so in one line (no traceback without CARDGEN_DEBUG)."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
import requests
from simclient import FIXED_JSON, MODEL

from cardgen.errors import ServerError
from cardgen.sim.config import SimConfig
from cardgen.sim.scheduler import Scheduler
from cardgen.sim.server import SimServer, run_server

# the real-time server's engine loop, over HTTP
pytestmark = pytest.mark.sockets


def test_a_broken_engine_loop_stops_the_server_with_one_line(capfd, monkeypatch):
    monkeypatch.delenv("CARDGEN_DEBUG", raising=False)

    def broken(self, start):
        raise ValueError("boom")

    monkeypatch.setattr(Scheduler, "next_step", broken)
    config = SimConfig(model=MODEL, perf="fixed", fixed_json=FIXED_JSON, port=0, watch_parent=False,
                       max_lifetime_s=30)

    def send(url: str) -> None:
        with contextlib.suppress(requests.RequestException):  # the server stops under it
            requests.post(f"{url}/v1/completions", json={"prompt": "hello there", "max_tokens": 4}, timeout=10)

    def ready(server: SimServer) -> None:  # one request wakes the engine loop
        threading.Thread(target=send, args=(server.url,), daemon=True).start()

    with pytest.raises(ServerError, match="engine loop failed: ValueError: boom"):
        asyncio.run(run_server(config, on_ready=ready))
    err = capfd.readouterr().err
    assert "cardgen-sim: the engine loop failed: ValueError: boom" in err
    assert "Traceback" not in err
