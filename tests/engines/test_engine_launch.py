"""launched_engine(): command, health wait, failure messages, and a clean stop however the block ends.

A stand-in engine (fake_engine.py, a tiny HTTP server) plays the child process, so these run in seconds; the
real vLLM launch is in test_engine_vllm.py.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import requests
from engine_helpers import FAKE

from cardgen.engines import launched_engine
from cardgen.engines.launch import parse_arguments
from cardgen.errors import ServerError, UsageError

# engine processes: health waits, SIGTERM and SIGKILL, timeouts of a second or so
pytestmark = pytest.mark.sockets


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent to reap it is as good as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_launch_waits_for_health_records_everything_and_stops(fake, tmp_path):
    log = tmp_path / "server.log"
    with launched_engine(fake, "org/model", engine_args="--delay 0.5 --api-key s3cret --max-num-seqs=8",
                         log_path=log, env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "hf_secret"}) as srv:
        assert requests.get(srv.url + "/health", timeout=5).status_code == 200
        assert srv.url.startswith("http://127.0.0.1:")
        info = srv.launch_info
        pid = srv.pid
        assert alive(pid)
    assert info["engine"] == "fake" and info["engine_version"] == "9.9.9" and info["pid"] == pid
    assert info["command"][1:] == [FAKE, "--model", "org/model", "--host", "127.0.0.1", "--port", str(info["port"]),
                                   "--delay", "0.5", "--api-key", "***", "--max-num-seqs=8"]
    assert info["arguments"] == {"positional": FAKE, "model": "org/model", "host": "127.0.0.1",
                                 "port": str(info["port"]), "delay": "0.5", "api_key": "***", "max_num_seqs": "8"}
    assert info["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1" and info["env"]["VLLM_FAKE_SETTING"] == "on"
    assert "HF_TOKEN" not in info["env"]
    assert info["ready_after_s"] >= 0.4
    assert info["stopped"] == "stopped with SIGTERM"
    assert wait_gone(pid)
    text = log.read_text()
    assert "s3cret" not in text and "fake engine: serving org/model" in text and "stopped with SIGTERM" in text


def test_engine_that_dies_at_start_reports_its_log(fake, tmp_path):
    with pytest.raises(ServerError) as err:
        with launched_engine(fake, "m", engine_args="--die 3", log_path=tmp_path / "server.log"):
            pytest.fail("must not get here")
    message = err.value.message
    assert "exited with code 3 before it was ready" in message and "\n" not in message
    assert "| fake engine: boom, cannot load the model" in message and "# cardgen: starting fake" in message
    assert err.value.log_tail.splitlines()[-1] == "fake engine: boom, cannot load the model"


def test_engine_not_healthy_in_time_is_stopped(fake, tmp_path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"was not ready .* after 1 s \(it was not healthy\)"):
        with launched_engine(fake, "m", engine_args=f"--delay 30 --child-pid-file {pid_file}",
                             log_path=tmp_path / "server.log", startup_timeout_s=1):
            pytest.fail("must not get here")
    assert time.monotonic() - started < 15  # its 1 s timeout, not the engine's 30 s delay (14 s of margin)
    assert wait_gone(int(pid_file.read_text()))


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_errors_and_ctrl_c_inside_the_block_stop_the_whole_group(fake, tmp_path, failure):
    pid_file = tmp_path / "child.pid"
    with pytest.raises(failure):
        with launched_engine(fake, "m", engine_args=f"--child-pid-file {pid_file}",
                             log_path=tmp_path / "server.log") as srv:
            pid = srv.pid
            raise failure()
    assert wait_gone(pid)
    assert wait_gone(int(pid_file.read_text()))  # the engine's own child went with it


def test_sigterm_to_cardgen_stops_the_engine(fake, tmp_path):
    before = signal.getsignal(signal.SIGTERM)  # a session-wide engine of other tests may have its own
    with pytest.raises(SystemExit) as exc:
        with launched_engine(fake, "m", log_path=tmp_path / "server.log") as srv:
            pid = srv.pid
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the handler raises SystemExit in here
                time.sleep(0.01)
            pytest.fail("SIGTERM did not end the block")
    assert exc.value.code == 128 + signal.SIGTERM
    assert wait_gone(pid)
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_engine_that_ignores_sigterm_is_killed(fake, tmp_path):
    with launched_engine(fake, "m", engine_args="--ignore-term", log_path=tmp_path / "server.log",
                         stop_timeout_s=1) as srv:
        pid = srv.pid
    assert srv.launch_info["stopped"] == "killed with SIGKILL"
    assert wait_gone(pid)


def test_missing_engines_say_how_to_install_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no text-generation-launcher, no llama-server
    monkeypatch.delenv("CARDGEN_LLAMA_SERVER", raising=False)
    for engine, hint in (("tgi", "text-generation-launcher"), ("llamacpp", "llama-server"),
                         ("sglang", "pip install sglang")):
        with pytest.raises(ServerError) as err:
            with launched_engine(engine, "m", log_path=tmp_path / "server.log"):
                pytest.fail("must not get here")
        message = err.value.message
        assert hint in message and "\n" not in message
    monkeypatch.setenv("CARDGEN_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(ServerError, match="CARDGEN_LLAMA_SERVER"):
        with launched_engine("llamacpp", "m.gguf", log_path=tmp_path / "server.log"):
            pass


def test_bad_requests_are_usage_errors(fake, tmp_path):
    with pytest.raises(UsageError, match="--port is chosen by cardgen"):
        with launched_engine(fake, "m", engine_args="--port 9", log_path=tmp_path / "l"):
            pass
    with pytest.raises(UsageError, match="cannot start"):
        with launched_engine("openai-compatible", "m", log_path=tmp_path / "l"):
            pass
    with pytest.raises(UsageError, match="unknown engine"):
        with launched_engine("tensorrt", "m", log_path=tmp_path / "l"):
            pass


def test_parse_arguments_like_a_parameters_table():
    argv = ["serve", "org/m", "--tensor-parallel-size", "2", "--enforce-eager", "--rope-scaling={\"a\": 1}",
            "--offset", "-1", "--lora", "a", "--lora", "b", "--hf-token", "hf_x", "--token=t"]
    assert parse_arguments(argv) == {
        "positional": ["serve", "org/m"], "tensor_parallel_size": "2", "enforce_eager": True,
        "rope_scaling": "{\"a\": 1}", "offset": "-1", "lora": ["a", "b"], "hf_token": "***", "token": "***",
    }


@pytest.mark.parametrize(("engine", "binary", "version", "expected"), [
    ("tgi", "text-generation-launcher", "2.4.1", ["--model-id", "org/m", "--hostname", "127.0.0.1", "--port"]),
    ("llamacpp", "llama-server", "4589 (1a2b3c4)", ["--model", "org/m", "--host", "127.0.0.1", "--port"]),
])
def test_binary_engines_are_started_from_path(tmp_path, monkeypatch, engine, binary, version, expected):
    """TGI and llama.cpp cannot run here: a stand-in binary of the same name checks the command and version."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / binary
    exe.write_text(f"#!/bin/sh\nFAKE_ENGINE_NAME={binary} exec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CARDGEN_LLAMA_SERVER", raising=False)
    with launched_engine(engine, "org/m", log_path=tmp_path / "server.log") as srv:
        info = srv.launch_info
    assert info["engine_version"] == version
    assert info["command"][0] == str(exe) if engine == "llamacpp" else info["command"][0] == binary
    assert info["command"][1:6] == expected
    if engine == "llamacpp":
        assert "--metrics" in info["command"] and info["arguments"]["metrics"] is True
    assert info["stopped"] == "stopped with SIGTERM"


def test_a_server_already_on_the_port_is_not_taken_for_the_engine(fake, tmp_path):
    """Engines bind late: if someone else answers on the chosen port, launched_engine must not accept it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Impostor(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    impostor = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    port = impostor.server_address[1]
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ServerError, match="another process answers on its port"):
            with launched_engine(fake, "m", engine_args="--delay 30", log_path=tmp_path / "server.log", port=port,
                                 startup_timeout_s=3):
                pytest.fail("must not get here")
    finally:
        impostor.shutdown()
        impostor.server_close()


def test_free_ports_are_below_the_ephemeral_range():
    from cardgen.engines.launch import _ephemeral_range, free_port

    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(5)}
    assert all(20000 <= p < low for p in ports) or low <= 20001
