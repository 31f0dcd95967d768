"""The server stops by itself: when its parent dies, after its lifetime, and cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests
from simclient import sim_argv

from cardgen.sim.launch import running_sim

# the real-time server as a process: it stops when its parent dies, after its lifetime, on SIGTERM
pytestmark = pytest.mark.sockets


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # an orphan nobody reaped yet counts as gone
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def test_stops_when_its_parent_dies(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    parent_code = textwrap.dedent(f"""
        import subprocess, sys, time
        from pathlib import Path
        argv = {sim_argv("--no-metrics")!r}
        child = subprocess.Popen([sys.executable, "-m", "cardgen", "serve-sim", *argv, "--port", "0",
                                  "--port-file", {str(port_file)!r}], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        sim_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 20
        while not port_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.05)
        assert requests.get(f"{url}/metrics", timeout=2).status_code == 404  # --no-metrics
        assert _alive(sim_pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while _alive(sim_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(sim_pid):
        os.kill(sim_pid, signal.SIGKILL)
        raise AssertionError("the virtual server outlived its parent")


def test_max_lifetime_and_graceful_stop(tmp_path: Path) -> None:
    with running_sim(sim_argv("--max-lifetime-s", "1.5"), log_path=tmp_path / "a.log") as sim:
        assert sim.process.wait(timeout=10) == 0
    assert "max lifetime" in (tmp_path / "a.log").read_text()
    with running_sim(sim_argv(), log_path=tmp_path / "b.log") as sim:
        pass
    assert sim.process.returncode == 0
    assert "stopped (SIGTERM)" in (tmp_path / "b.log").read_text()
