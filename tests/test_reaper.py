"""A test session that is killed leaves no server running (``tests/reaper.py``): the stage runner
(``tests/stages.py``) runs a test whose fixture starts servers as the engine fixtures do (each in a session of its
own, so no signal to the tests reaches it, one of them deaf to SIGTERM like a hung engine), and is killed with
SIGKILL or SIGTERM mid-test; afterwards no process of that session is left, and none of its servers listens on
its port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import reaper

from cardgen.engines.process import listening_pid

pytestmark = [pytest.mark.wire, pytest.mark.slow]  # real processes and signals; nothing timed is judged

HERE = Path(__file__).resolve().parent

SERVER = textwrap.dedent("""
    import signal, socket, sys, time
    if sys.argv[2] == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.create_server(("127.0.0.1", 0))
    open(sys.argv[1], "w").write(str(sock.getsockname()[1]))
    while True:
        time.sleep(60)
""")

INNER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from pathlib import Path

    import pytest

    OUT = Path({out!r})

    @pytest.fixture
    def servers():
        procs = []
        for name in ("plain", "deaf"):
            port = OUT / f"{{name}}.port"
            procs.append(subprocess.Popen([sys.executable, "-c", {server!r}, str(port), name],
                                          start_new_session=True))  # as cardgen.engines.launch starts an engine
            while not port.exists() or not port.read_text():
                time.sleep(0.05)
        yield procs
        for proc in procs:
            proc.kill()

    def test_held(servers):
        ports = [int((OUT / f"{{name}}.port").read_text()) for name in ("plain", "deaf")]
        state = {{"pids": [p.pid for p in servers], "ports": ports, "token": os.environ["{mark}"]}}
        (OUT / "state.json.part").write_text(json.dumps(state))
        (OUT / "state.json.part").rename(OUT / "state.json")
        time.sleep(120)
""")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_stage_runner_leaves_no_server_running(sig, tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER.format(out=str(tmp_path), server=SERVER, mark=reaper.MARK))
    env = {k: v for k, v in os.environ.items() if k != reaper.MARK}  # a session of its own, as make test's
    log = tmp_path / "runner.log"
    with log.open("w") as out:
        runner = subprocess.Popen([sys.executable, str(HERE / "stages.py"), sys.prefix, "--fast", "-p",
                                   "no:cacheprovider", str(tmp_path / "test_inner.py")], env=env, cwd=tmp_path,
                                  stdout=out, stderr=subprocess.STDOUT)
    state_file = tmp_path / "state.json"
    try:
        deadline = time.monotonic() + 120
        while not state_file.exists():
            assert runner.poll() is None, f"the stage runner ended before its test held the servers:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the inner test never started its servers:\n{log.read_text()}"
            time.sleep(0.1)
        state = json.loads(state_file.read_text())
        assert all(alive(pid) for pid in state["pids"]), state
        assert all(answers(port) for port in state["ports"]), state
        assert [listening_pid(port) for port in state["ports"]] == state["pids"], state
        assert set(state["pids"]) <= set(reaper.marked(state["token"])), (state, reaper.marked(state["token"]))
        runner.send_signal(sig)
        runner.wait(timeout=60)
        deadline = time.monotonic() + reaper.GRACE_S + 30  # the deaf server waits out the grace
        while any(alive(pid) for pid in reaper.marked(state["token"])) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid in reaper.marked(state["token"]) if alive(pid)]
        assert not left, f"left running after {sig.name}: {left}"
        assert not any(alive(pid) for pid in state["pids"])
        # by the listener's pid: on a busy machine another test may have bound a port freed meanwhile
        assert not any(listening_pid(port) in state["pids"] for port in state["ports"])
    finally:
        if runner.poll() is None:
            runner.kill()
        if state_file.exists():
            reaper.sweep(json.loads(state_file.read_text())["token"], grace_s=0)


def test_the_sweep_deletes_the_network_namespaces_of_its_session_alone():
    """A session killed outright cannot delete the namespaces its tests made (``tests/load/netns.py``): its
    watchdog's sweep does, those named with its token, and no other session's."""
    if os.geteuid() != 0 and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("network namespaces need root")
    ours, theirs = f"{os.getpid()}-{os.urandom(6).hex()}", f"{os.getpid()}-{os.urandom(6).hex()}"
    names = [f"{reaper.netns_prefix(ours)}a1-x", f"{reaper.netns_prefix(theirs)}b2-x"]
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
        assert reaper.sweep_netns(ours) == names[:1]
        left = {p.name for p in reaper.NETNS_DIR.iterdir()}
        assert names[0] not in left and names[1] in left
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
