"""The session's servers started ahead (servers.py): a fixture takes one only when it is there and answers, and
otherwise starts its own, without waiting on a process that is gone."""

from __future__ import annotations

import json
import os

import pytest
import servers


def test_no_server_ahead_without_the_variable(monkeypatch):
    monkeypatch.delenv("CARDGEN_TEST_SERVERS", raising=False)
    assert servers.started_ahead("vllm") is None


def test_a_failed_or_gone_starter_is_not_waited_for(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDGEN_TEST_SERVERS", str(tmp_path))
    (tmp_path / "pid").write_text(str(os.getpid()))  # alive
    (tmp_path / "vllm.failed").write_text("ServerError: no vLLM")

    def waited(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s for a server that is not coming")

    monkeypatch.setattr(servers.time, "sleep", waited)  # the rule, not the clock: it must not wait at all
    assert servers.started_ahead("vllm") is None
    (tmp_path / "pid").write_text("999999999")  # no such process: nothing is starting vllm-features
    assert servers.started_ahead("vllm-features") is None


def test_a_server_that_does_not_answer_is_not_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("CARDGEN_TEST_SERVERS", str(tmp_path))
    (tmp_path / "vllm.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "launch_info": {}, "start_s": 1,
                                                    "tmp": str(tmp_path)}))
    assert servers.started_ahead("vllm") is None


@pytest.mark.engine  # the flag is added where the installed vLLM has it: make install alone has no vLLM
def test_the_recipes_are_the_fixtures(tmp_path):
    assert set(servers.RECIPES) == {"vllm", "vllm-features", "vllm-vlm", "vllm-guidance"}
    assert "--enable-per-request-metrics" in servers.RECIPES["vllm"].args(tmp_path)
    guidance = servers.RECIPES["vllm-guidance"].args(tmp_path)
    assert "--enable-per-request-metrics" in guidance and '"backend": "guidance"' in " ".join(guidance)
    vlm = servers.RECIPES["vllm-vlm"]
    assert vlm.model is servers.tiny_vlm and "--limit-mm-per-prompt" in vlm.args(tmp_path)
