"""The session's server the calibration is not told about (unknown_server.py), calibrated and measured once."""

from __future__ import annotations

import pytest
from unknown_server import Unknown, run_unknown


@pytest.fixture(scope="session")
def unknown(tmp_path_factory: pytest.TempPathFactory) -> Unknown:
    return run_unknown(tmp_path_factory.mktemp("calibration"))
