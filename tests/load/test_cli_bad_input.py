"""Bad input: a one-line error that says what to fix, a non-zero exit within seconds, never a traceback."""

import subprocess
import sys
import time

import pytest

CARDGEN = [sys.executable, "-m", "cardgen"]


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*CARDGEN, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args,needle", [
    (["build", "m", "--url", "http://127.0.0.1:9", "--suite", "quick"], "cannot connect"),
    (["build", "m", "--url", "not a url"], "is not a server URL"),
    (["build", "m", "--url", "http://127.0.0.1:99999"], "invalid port"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--suite", "fastest"], "unknown suite 'fastest'"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--suite", "missing.yaml"], "does not exist"),
    # missing parents of --out are created; a file in the way is bad input
    (["build", "m", "--url", "http://127.0.0.1:9", "--out", "/dev/null/x/run"], "/dev/null is not a directory"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--workers", "-1"], "--workers"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--workers", "many"], "--workers must be a number of processes or auto"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--workers", "auto", "--remote-workers"], "counts this machine's cores"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--scrape-interval", "0.01"], "scrape-interval"),
    (["build", "m", "--url", "http://127.0.0.1:9", "--launch", "vllm"], "not both"),
])
def test_bad_input_is_one_line_and_fast(args, needle):
    t0 = time.monotonic()
    proc = run(*args)
    assert time.monotonic() - t0 < 15  # a process's start and one check (~1 s): 14 s of margin, no server asked
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("content,needle", [
    ("name: x\nscenarios: [ {kind: closed", "not valid YAML"),
    ("name: x\nscenarios:\n  - kind: closed\n    prompt_tokens: 8\n    output_tokens: 8\n    parallel: 1\n    speed: 3\n",
     "unknown key"),
])
def test_bad_suite_file(tmp_path, content, needle):
    suite = tmp_path / "s.yaml"
    suite.write_text(content)
    proc = run("build", "m", "--url", "http://127.0.0.1:9", "--suite", str(suite))
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
