"""``make test``'s three stages, and how they share the two cores.

- **untimed**: the tests that time nothing (rules, figures, formats, and those marked ``wire`` or ``browser``), on
  both cores with pytest-xdist;
- **sockets**: the tests that time the virtual server over real sockets, one at a time;
- **engine**: the tests against the real engines (``tests/engines``), one at a time, with the session's vLLM
  servers started ahead (``tests/engines/servers.py``).

The timed stages must not share the cores with other work. Where this process may lower and raise a process's
scheduling class (``servers.can_promote``: root, as CI runs), the untimed stage and the starting servers run in
Linux's idle class (``SCHED_IDLE``) *beside* the sockets stage: an idle-class process runs only on a core that no
normal process wants, and a normal process that wakes preempts it at once, so the sockets tests see the cores as
if alone (they wait on the virtual server's clock for most of their 2 1/2 minutes: 5 to 40 % of the cores),
while the untimed tests take the time they leave. The engine stage waits until the untimed tests are done: beside
them, even in the idle class, a real engine's figures moved (the client's share of vLLM's TTFT went from under
0.1 s to 0.113 s). A fixture moves the servers back to the normal class when it takes one. Elsewhere the stages
run one after another: untimed (with the servers starting beside it), engine, sockets.

The untimed stage's output goes to a log, printed once it ends. The exit status is 0 only when every stage
passed; Ctrl-C, SIGTERM or SIGHUP stop the stages and the servers, and should this process be killed outright
(SIGKILL), its watchdog stops whatever it started (``tests/reaper.py``).

``--fast`` (``make test-fast``) runs only the untimed stage, less its slow, ``wire`` and browser tests, in the
foreground, and starts no server.

    python tests/stages.py VENV [--fast] [PYTEST ARGS...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "engines"))

import reaper  # noqa: E402  (tests/, this file's folder)
import servers  # noqa: E402  (tests/engines, put on the path above)

UNTIMED_MARKS = "not sockets and not engine"
# a module's tests on one worker (--dist loadscope): its module-scoped fixtures (a calibrated build, a site of
# several runs: 10-30 s each) are made once, not once on each core
UNTIMED = ["-n", "2", "--dist", "loadscope", "-m", UNTIMED_MARKS]
FAST = ["-n", "2", "--dist", "loadscope", "-m", f"{UNTIMED_MARKS} and not browser and not slow and not wire"]
SOCKETS = ["-m", "sockets and not engine"]
ENGINE = ["-m", "engine", "tests/engines"]  # only that folder is collected (tests/packaging/test_stages.py)


def _say(text: str) -> None:
    print(f"\n== make test: {text}", flush=True)


def _pytest(args: list[str], extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", *extra, *args]


def _stage(name: str, args: list[str], extra: list[str], env: dict[str, str]) -> int:
    _say(f"{name} tests")
    started = time.monotonic()
    code = subprocess.call(_pytest(args, extra), env=env)
    _say(f"{name} tests: {'passed' if code == 0 else f'FAILED (exit {code})'} in {time.monotonic() - started:.0f} s")
    return code


def main(venv: Path, extra: list[str]) -> int:
    where, cache, log = venv / "test-servers", venv / "cardgen-cache", venv / "test-untimed.log"
    env = dict(os.environ)
    engine_env = {**env, "CARDGEN_TEST_SERVERS": str(where)}
    overlap = servers.can_promote()
    servers.start(where, cache, in_idle_class=overlap)
    codes: dict[str, int] = {}
    try:
        if not overlap:
            _say("the stages run one after another (no right to raise a process's scheduling class back)")
            codes["untimed"] = _stage("untimed", UNTIMED, extra, env)
            codes["engine"] = _stage("engine", ENGINE, extra, engine_env)
            servers.stop(where)
            codes["sockets"] = _stage("sockets", SOCKETS, extra, env)
            return _verdict(codes)
        _say(f"untimed tests in the idle scheduling class, beside the sockets stage (output: {log})")
        started = time.monotonic()
        with log.open("w") as out:
            untimed = subprocess.Popen(_pytest(UNTIMED, extra), env=env,
                                       stdout=out, stderr=subprocess.STDOUT, preexec_fn=servers.idle)
            try:
                codes["sockets"] = _stage("sockets", SOCKETS, extra, env)
                if untimed.poll() is None:
                    _say("waiting for the untimed tests")
                codes["untimed"] = untimed.wait()
            finally:
                if untimed.poll() is None:
                    untimed.terminate()
                    untimed.wait()
        print(log.read_text(), end="", flush=True)
        _say(f"untimed tests: {'passed' if codes['untimed'] == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s")
        codes["engine"] = _stage("engine", ENGINE, extra, engine_env)
        return _verdict(codes)
    finally:
        servers.stop(where)


def _exit_on(signum: int, frame: object) -> None:
    """A SIGTERM or SIGHUP ends this process as Ctrl-C does: through every ``finally`` (the stage's pytest is
    killed by ``subprocess.call``, the servers are stopped), where the default action would skip them."""
    raise SystemExit(128 + signum)


def _verdict(codes: dict[str, int]) -> int:
    failed = [name for name, code in codes.items() if code != 0]
    _say(f"FAILED: {', '.join(failed)}" if failed else "every stage passed")
    return 1 if failed else 0


if __name__ == "__main__":
    reaper.guard()  # before any stage or server starts: each inherits the session's mark
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on)
    venv_dir, rest = Path(sys.argv[1]).resolve(), sys.argv[2:]
    if rest[:1] == ["--fast"]:
        sys.exit(subprocess.call(_pytest(FAST, rest[1:])))
    sys.exit(main(venv_dir, rest))
