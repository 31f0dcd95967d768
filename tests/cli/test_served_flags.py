"""The flags of what the virtual server's model does (reasoning, speculative decoding, LoRA) and of the adapters a
launched engine serves: every wrong combination is one line that says what to fix, and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cardgen.cli.main import main
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

LORA_SUITE = ("name: l\nscenarios:\n- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: 2, "
              "min_requests: 4, adapters: [a, b]}\n")
PLAIN_SUITE = "name: p\nscenarios:\n- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: 2, min_requests: 4}\n"


def run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err.strip()
    return stop.value.code, err


@pytest.mark.parametrize("args, words", [
    (["--spec-tokens", "3"], "--spec-tokens needs --spec-acceptance"),
    (["--spec-acceptance", "0.5"], "--spec-acceptance needs --spec-tokens"),
    (["--spec-tokens", "3", "--spec-acceptance", "1.5"], "--spec-acceptance must be in [0, 1]"),
    (["--spec-tokens", "40", "--spec-acceptance", "0.5"], "--spec-tokens must be 1 to 16"),
    (["--reasoning-share", "2"], "--reasoning-share must be in [0, 1]"),
    (["--lora-rank", "8"], "--lora-rank and --max-loras need adapters"),
    (["--url", "http://127.0.0.1:9", "--spec-tokens", "3"], "describes the virtual server's model"),
    (["--lora-module", "a=/nowhere"], "--lora-module serves an adapter from an engine cardgen starts"),
])
def test_wrong_flags_are_one_line_errors(args, words, tmp_path, capsys):
    suite = tmp_path / "plain.yaml"
    suite.write_text(PLAIN_SUITE)
    code, err = run(["build", "CodeLlama-7b", "--suite", str(suite), "--out", str(tmp_path / "out"), *args], capsys)
    assert code != 0 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_launched_engine_must_serve_every_adapter_the_suite_asks_for(tmp_path):
    # in a process of its own: a load over HTTP imports Locust, which patches the standard library
    suite = tmp_path / "lora.yaml"
    suite.write_text(LORA_SUITE)
    adapter = tmp_path / "a"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    base = [sys.executable, "-m", "cardgen", "build", "m", "--launch", "vllm", "--suite", str(suite), "--out",
            str(tmp_path / "o")]
    for extra, words in ((["--lora-module", f"a={adapter}"], "asks for adapter 'b', which no --lora-module serves"),
                         (["--lora-module", f"a={tmp_path}", "--lora-module", "b=x"],
                          "adapter_config.json is missing or has no rank")):
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_lora_flags_for_each_engine(tmp_path):
    from cardgen.engines import get_adapter
    from cardgen.engines.lora import LoraModule

    for name, r in (("a", 8), ("b", 20)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(f'{{"r": {r}}}')
    modules = [LoraModule.parse(f"{n}={tmp_path / n}") for n in ("a", "b")]
    assert get_adapter("vllm").lora_args(modules) == [
        "--enable-lora", "--lora-modules", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--max-loras", "2",
        "--max-lora-rank", "32"]  # 20 rounded up to a rank vLLM accepts
    assert get_adapter("sglang").lora_args(modules)[-4:] == ["--max-loras-per-batch", "2", "--max-lora-rank", "20"]
    with pytest.raises(Exception, match="cannot serve LoRA adapters with"):
        get_adapter("tgi").lora_args(modules)


@pytest.mark.parametrize("entry, words", [
    ("adapters: [a, a]", "must name each adapter once"),
    ("adapter_counts: [1]", "'adapter_counts' needs 'adapters'"),
    ("{adapters: [a], adapter_counts: [2]}", "must be 0 to 1"),
    ("{adapters: [a], adapter_pick: sometimes}", "adapter_pick"),
])
def test_suite_adapter_keys_are_checked(entry, words):
    fields = entry.strip("{}")
    text = ("name: s\nscenarios:\n- {kind: closed, prompt_tokens: 8, output_tokens: 4, parallel: 1, "
            f"{fields}}}\n")
    with pytest.raises(Exception, match=words):
        parse_suite(text, source="s.yaml")
