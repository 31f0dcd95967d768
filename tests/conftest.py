"""Suite-wide test ordering: tests marked ``engine`` (a real vLLM server, kept for the session) run last, so
the engine's process does not share the two cores with the timing-sensitive load and server tests."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("engine") is not None)  # stable: order kept otherwise
