"""Nothing a test session starts outlives it, however it ends (a timeout, Ctrl-C, SIGTERM, SIGKILL).

A fixture's ``finally`` and ``tests/stages.py``'s stop the servers they start when the session ends in order; they
cannot when its process is killed outright (SIGKILL, or a SIGTERM nobody handles). A timed-out ``make test`` left
the session's vLLM servers (about 1.4 GB each) running for their 45-minute lifetime that way: each engine runs in a
session of its own, so no signal to the tests' process group reaches it, and once its parent is gone no process
tree leads to it either.

So the outermost process of a test session (``tests/stages.py``, or pytest run by hand) calls :func:`guard`: it
puts a mark of its own (:data:`MARK`) into its environment, which everything it starts inherits (pytest, its
workers, ``cardgen build``, the virtual server, llama-server, ``transformers serve``, vLLM and its engine core),
and starts a watchdog in a session of its own, out of reach of the signals that stop the tests. The watchdog
waits on a pidfd of that process, which the kernel makes readable when it exits by any means (no polling, so no
CPU taken from the timed tests, and no window a short-lived process could slip through), then finds every process
whose environment carries the mark, sends it SIGTERM, and SIGKILL after :data:`GRACE_S`. A process inside the
session finds the mark already set and starts no second watchdog.

    python tests/reaper.py watch PID TOKEN    (what guard starts)
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARK = "CARDGEN_TEST_SESSION"
NETNS_DIR = Path("/run/netns")  # where ``ip netns add`` names its namespaces
GRACE_S = 10.0  # a vLLM server stops in a few seconds on SIGTERM; after this, SIGKILL


def guard() -> str | None:
    """Make this process the owner of a test session, unless one already is (the mark is set): returns the
    session's token when this call made it the owner, else None."""
    if os.environ.get(MARK):
        return None
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[MARK] = token
    subprocess.Popen([sys.executable, __file__, "watch", str(os.getpid()), token], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                     env={k: v for k, v in os.environ.items() if k != MARK})  # never a target of its own sweep
    return token


def marked(token: str) -> list[int]:
    """Every process whose environment carries the session's mark (as it was when the process started)."""
    needle = f"{MARK}={token}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):  # ended meanwhile, or not ours to read
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return [pid for pid in found if pid != os.getpid()]


def netns_prefix(token: str) -> str:
    """How the network namespaces of a session's tests begin (``tests/load/netns.py``): its sweep deletes them."""
    return f"cgt-{token.rsplit('-', 1)[-1][:12]}-" if token else "cgt-none-"


def sweep_netns(token: str) -> list[str]:
    """Delete the network namespaces a killed session's tests left (their processes are swept first)."""
    prefix = netns_prefix(token)
    names = sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix)) if NETNS_DIR.is_dir() else []
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return names


def sweep(token: str, *, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to every marked process, SIGKILL to those left after ``grace_s``, then the session's network
    namespaces deleted; the pids found first."""
    pids = marked(token)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        sweep_netns(token)
    return pids


def watch(owner: int, token: str) -> None:
    """Wait until process ``owner`` has exited, then :func:`sweep` its session."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the owner's end ends the watch
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        fd = None  # already gone
    except (AttributeError, OSError):  # no pidfd (before Linux 5.3): poll for being orphaned by the owner
        while os.getppid() == owner:
            time.sleep(1.0)
        fd = None
    if fd is not None:
        select.select([fd], [], [])
        os.close(fd)
    sweep(token)


if __name__ == "__main__":
    if sys.argv[1:2] != ["watch"] or len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} watch PID TOKEN")
    watch(int(sys.argv[2]), sys.argv[3])
