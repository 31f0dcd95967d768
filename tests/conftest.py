"""Suite-wide test ordering: tests marked ``engine`` (a real vLLM server, kept for the session) run last, so
the engine's process does not share the two cores with the timing-sensitive load and server tests. And a pytest
run by hand owns its session (``tests/reaper.py``): no server its tests start outlives it, however it ends."""

from __future__ import annotations

import pytest
import reaper  # tests/, on the path as this file's folder


def pytest_configure(config: pytest.Config) -> None:
    reaper.guard()  # a no-op under tests/stages.py and in pytest-xdist's workers: their session has an owner


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("engine") is not None)  # stable: order kept otherwise
