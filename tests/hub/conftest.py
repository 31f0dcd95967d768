"""Fixtures for the Hub tests: a local stand-in Hub the real huggingface_hub client talks to, and the
environment that points the client at it (a made-up token, an isolated HF_HOME, telemetry off, online)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakehub import TOKEN, RunningHub, start_fake_hub


@pytest.fixture
def fake_hub(tmp_path, monkeypatch) -> Iterator[RunningHub]:
    import huggingface_hub.constants as constants

    running = start_fake_hub(TOKEN)
    running.hub.add_repo("model", "org/model", {"README.md": b"---\nlicense: mit\n---\n# The owner's card\n"})
    running.hub.add_repo("dataset", "org/runs")
    monkeypatch.setenv("HF_ENDPOINT", running.hub.url.rstrip("/"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    try:
        yield running
    finally:
        running.close()
