"""Work spread over forked processes (cardgen.forked)."""

from __future__ import annotations

import subprocess
import sys

from cardgen.forked import forked_map


def test_forked_map_gives_each_result_in_order() -> None:
    assert forked_map(abs, [-3, 1, -2, 5, -8], workers=2) == [3, 1, 2, 5, 8]


# a measured run's process: gevent's monkey patching, then a thread started and cancelled before it ran (as
# matplotlib's font manager does the first time it builds its cache on a machine), then figures drawn forked
FORK_AFTER_A_PENDING_THREAD = """
from gevent import monkey
monkey.patch_all()
import threading
timer = threading.Timer(5, print)
timer.start()
timer.cancel()
from cardgen.forked import forked_map
print(forked_map(abs, [-1, -2, -3, -4], workers=2))
"""


def test_a_thread_pending_under_gevent_runs_in_the_parent_not_in_each_forked_child() -> None:
    proc = subprocess.run([sys.executable, "-c", FORK_AFTER_A_PENDING_THREAD], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1, 2, 3, 4]"
    assert "Traceback" not in proc.stderr, proc.stderr
