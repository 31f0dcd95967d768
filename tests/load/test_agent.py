"""The agent in a load process of its own (Locust monkey-patches the process that imports it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_in_load_process(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", "import locust\n" + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_wave_watcher_reads_preemptions_through_the_engine_adapter():
    run_in_load_process("""
        from cardgen.load.agent import _SaturationWatcher
        from cardgen.scenarios import WatchState

        TEXT = ("# TYPE vllm:num_preemptions_total counter\\nvllm:num_preemptions_total 3\\n"
                "# TYPE sglang:num_retracted_requests_total counter\\nsglang:num_retracted_requests_total 2\\n")

        class Resp:
            status_code, text = 200, TEXT

        def poll(engine):
            w = _SaturationWatcher("http://127.0.0.1:9", {}, engine, WatchState())
            w.session.get = lambda url, timeout: Resp()
            return w._read()[0]

        assert poll("vllm") == 3.0 and poll("cardgen-sim") == 3.0
        assert poll("sglang") == 2.0  # its own name for a preempted request
        assert poll("tgi") is None and poll("openai-compatible") is None  # no such counter: unknown, not 0
    """)


def test_each_agent_has_its_own_user_class_under_the_name_the_master_spawns():
    run_in_load_process("""
        from cardgen.load.agent import USER_CLASS_NAME, Agent, CardgenUser

        a, b = Agent(worker="a", send=print), Agent(worker="b", send=print)
        ua, ub = a.user_class(), b.user_class()
        assert ua.__name__ == ub.__name__ == CardgenUser.__name__ == USER_CLASS_NAME
        assert ua.agent is a and ub.agent is b and CardgenUser.agent is None
        assert issubclass(ua, CardgenUser)
    """)
