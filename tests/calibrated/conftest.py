"""The session's server the calibration is not told about (unknown_server.py), calibrated and measured once: once
for the whole test run, when pytest-xdist's workers share it (:mod:`once`: the first makes it under a lock, the
others read it back)."""

from __future__ import annotations

import pytest
from once import made_once
from unknown_server import Unknown, run_unknown


@pytest.fixture(scope="session")
def unknown(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Unknown:
    return made_once("calibration", tmp_path_factory, worker_id, run_unknown)
