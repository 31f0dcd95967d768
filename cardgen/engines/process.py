"""The process behind a server on this host: its command line and the environment variables that configure its
engine, secrets masked. An engine's endpoints do not say everything its command line does (llama.cpp never states
whether its slots share one KV cache), and a server cardgen measures at ``--url http://127.0.0.1:...`` is often
one a user started by hand on the same machine.

Read only for a URL whose host is this machine; nothing at all when the process cannot be found or read (another
user's, or psutil unable to list sockets).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import psutil

from cardgen.redact import is_secret_env, redact_argv

#: environment variables worth recording with a server's process (secrets never are)
ENV_PREFIXES = ("VLLM_", "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "OMP_NUM_THREADS", "SGLANG_", "LLAMA_")


def recorded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The engine's settings among ``env``, secrets left out."""
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES) and not is_secret_env(k)}


def is_local(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in (socket.gethostname(), socket.getfqdn())
    return address.is_loopback or address.is_unspecified


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` of this host, when it can be seen."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    except (psutil.Error, OSError):
        return None
    return None


def local_process(url: str) -> dict[str, Any] | None:
    """``{"pid", "command", "env"}`` of the server at ``url`` when it runs on this host; None otherwise."""
    parsed = urlparse(url)
    if not is_local(parsed.hostname):
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    pid = listening_pid(port)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        command = proc.cmdline()
        try:
            env = recorded_env(proc.environ())
        except (psutil.AccessDenied, psutil.ZombieProcess):
            env = {}
    except (psutil.Error, OSError):
        return None
    if not command:
        return None
    return {"pid": pid, "command": redact_argv(command), "env": env}
