"""``python -m cardgen ARGS`` in a process of its own, as a user runs it: the tests of the command line share it
(a load over HTTP imports Locust, which patches the standard library, so a command that loads never runs in the
test's own process)."""

from __future__ import annotations

import subprocess
import sys

CARDGEN = [sys.executable, "-m", "cardgen"]


def cardgen(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command's exit code and its output as text; ``timeout`` seconds at most."""
    return subprocess.run([*CARDGEN, *args], capture_output=True, text=True, timeout=timeout)
