"""Suite-wide test ordering: the real-engine tests that judge no timing (``engine`` and ``wire``: llama.cpp and
transformers serve, each a minute or so) run first, so the workers that share them out are not left with one long
test at the end; the other ``engine`` tests (a real vLLM server, kept for the session) run last, so the engine's
process does not share the two cores with the timing-sensitive load and server tests."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("engine") is None:
            return 1
        return 0 if item.get_closest_marker("wire") is not None else 2

    items.sort(key=rank)  # stable: order kept otherwise
