"""The session's server the calibration is not told about (unknown_server.py), calibrated and measured once: once
for the whole test run, when pytest-xdist's workers share it (the first makes it under a lock, the others read it
back), as pytest-xdist's documentation shows for a session fixture that must run once."""

from __future__ import annotations

import pytest
from filelock import FileLock
from unknown_server import Unknown, read_unknown, run_unknown


@pytest.fixture(scope="session")
def unknown(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Unknown:
    if worker_id == "master":  # no xdist
        return run_unknown(tmp_path_factory.mktemp("calibration"))
    root = tmp_path_factory.getbasetemp().parent / "calibration"  # the workers' common base
    with FileLock(f"{root}.lock"):
        done = root / "made"
        if done.is_file():
            return read_unknown(root)
        made = run_unknown(root)
        done.touch()
        return made
