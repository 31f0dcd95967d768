"""The main command says only what is true: a run that succeeded ends without an error or a false alarm (``make
demo`` once ended with ``cardgen recorder failed: I/O operation on closed file.`` after a good run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

FALSE_ALARMS = ("recorder failed", "closed file", "Traceback", "error", "Uncaught exception")


def test_a_good_virtual_run_prints_no_false_alarm(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\nscenarios:\n- {kind: closed, prompt_tokens: 64, output_tokens: 16, parallel: 2, "
                     "min_requests: 4}\n")
    gpu = tmp_path / "gpus" / "lab-card.yaml"  # a GPU of one's own: the card names it, never its path
    gpu.parent.mkdir()
    gpu.write_text("name: Lab-GPU-96\nmemory_gb: 96\nbandwidth_gb_s: 3000\npeak_tflops: 600\n")
    out = tmp_path / "runs" / "tiny"  # parents missing: created
    proc = subprocess.run([sys.executable, "-m", "cardgen", "build", "CodeLlama-7b", "--gpu", str(gpu), "--suite",
                           str(suite), "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for text in FALSE_ALARMS:
        assert text not in proc.stdout + proc.stderr, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out) and (out / "README.md").is_file()
    card = (out / "README.md").read_text("utf-8")
    assert "Lab-GPU-96" in card and "lab-card" not in card and str(tmp_path) not in card
    assert "1x Lab-GPU-96" in proc.stderr


def test_a_stopped_agent_sends_nothing_more():
    """The order that keeps the alarm away: the agent's measuring loop is over before the recorder closes."""
    code = textwrap.dedent("""
        import locust  # monkey-patches first, as in a load process
        import time
        import gevent
        from cardgen.load import agent as agent_module
        from cardgen.load.agent import Agent
        from cardgen.load.messages import LoadgenTick, Setup

        agent_module.LAG_REPORT_S = 0.05
        sent = []
        agent = Agent(worker="w", send=sent.append)
        agent.setup(Setup(model="m", templates={}, nonce=1))
        deadline = time.monotonic() + 30
        while sum(isinstance(m, LoadgenTick) for m in sent) < 2:  # two reports: the measuring loop runs
            assert time.monotonic() < deadline, sent
            gevent.sleep(0.01)
        loop = agent._lag_greenlet
        agent.stop()
        n = len(sent)
        assert loop.dead  # the measuring loop is over when stop() returns: nothing is left to send
        gevent.idle()  # whatever else was scheduled runs
        assert len(sent) == n, sent[n:]
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
