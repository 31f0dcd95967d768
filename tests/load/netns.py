"""Hosts of their own on one machine: Linux network namespaces joined by one bridge (issue 41).

    with Network() as net:
        server, master = net.host("server"), net.host("master")
        proc = server.popen([sys.executable, "-m", "cardgen", "serve-sim", ..., "--host", server.address])

Each host is a network namespace with its own interface (``eth0``) and address on 10.41.0.0/24; the bridge lives
in a namespace of its own (the hub), so the machine's own network is never touched and traffic stays among the
hosts. Two networks never meet (each has its own hub): their addresses may repeat. Processes are started in a host
with ``ip netns exec`` and inherit the test session's mark (``tests/reaper.py``).

:meth:`Network.close` (the context's exit, however the test ends) stops every process it started (SIGTERM, then
SIGKILL), then deletes every namespace it made; should the test session be killed outright, the session's
watchdog deletes the namespaces that carry its token (:func:`reaper.netns_prefix`). Root is needed (CI runs as
root): without it the fixture skips on a developer's machine and fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import reaper  # tests/, on the path

SUBNET = "10.41.0"


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")


@dataclass
class Host:
    """One namespace: its name, its address, and the processes started in it."""

    netns: str
    address: str
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    def argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in this host (in a session of its own: a signal meant for the tests does not reach it)."""
        proc = subprocess.Popen(self.argv(argv), start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], *, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout, **kwargs)


class Network:
    """A bridge in a hub namespace and the hosts attached to it (see the module docstring)."""

    def __init__(self) -> None:
        token = os.environ.get(reaper.MARK, "")
        self.prefix = f"{reaper.netns_prefix(token)}{uuid.uuid4().hex[:6]}-"
        self.hub = f"{self.prefix}hub"
        self.hosts: list[Host] = []
        self.made: list[str] = []

    def __enter__(self) -> Network:
        try:
            self._add_ns(self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            self.close()
            unable(f"no network namespaces here ({exc})")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def host(self, role: str) -> Host:
        """A new host on the bridge, with the next address (``.2``, ``.3``...)."""
        n = len(self.hosts) + 2
        name = f"{self.prefix}{role}"
        self._add_ns(name)
        _ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{n}", "netns", self.hub)
        _ip("-n", self.hub, "link", "set", f"p{n}", "master", "br0")
        _ip("-n", self.hub, "link", "set", f"p{n}", "up")
        _ip("-n", name, "addr", "add", f"{SUBNET}.{n}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        host = Host(netns=name, address=f"{SUBNET}.{n}")
        self.hosts.append(host)
        return host

    def close(self) -> None:
        """Stop every process started in a host, then delete every namespace made (the veths go with them)."""
        procs = [p for h in self.hosts for p in h.procs if p.poll() is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for name in reversed(self.made):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _ip("netns", "del", name)
        self.made.clear()


def unable(why: str) -> None:
    """Skip where namespaces cannot be made on a developer's machine; fail under ``CI=true`` (CI runs as root)."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.geteuid() == 0:
        pytest.fail(f"the network-namespace tests cannot run: {why}")
    pytest.skip(f"network namespaces need root: {why}")


def leftover(prefix: str) -> list[str]:
    """Namespaces whose names start with ``prefix`` (what a test left behind)."""
    where = Path("/run/netns")
    return sorted(p.name for p in where.iterdir() if p.name.startswith(prefix)) if where.is_dir() else []
