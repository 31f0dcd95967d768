"""Suite-wide test ordering: the real-engine tests that judge no timing (``engine`` and ``wire``, each a minute or
two) run first, so the workers that share them out are not left with one long test at the end, except those that
take a vLLM server make test starts ahead: they come after the others, when it is up; the other ``engine`` tests (a real vLLM server, kept for the session) run last, so the engine's
process does not share the two cores with the timing-sensitive load and server tests."""

from __future__ import annotations

import pytest

AHEAD = {"vllm_server", "vllm_features_server"}  # the fixtures of the servers make test starts ahead


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("engine") is None:
            return 1
        if item.get_closest_marker("wire") is None:
            return 3
        # the session's vLLM servers start while the untimed tests run: their tests come after the others
        return 2 if AHEAD & set(getattr(item, "fixturenames", ())) else 0

    items.sort(key=rank)  # stable: order kept otherwise
