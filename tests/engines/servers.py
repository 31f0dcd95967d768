"""The session's real engine servers, started ahead of the tests that use them.

``make test`` (``tests/stages.py``) starts them while the untimed tests run (:func:`start`; by hand,
``python tests/engines/servers.py start DIR``: a process of its own starts each server, writes ``DIR/NAME.json``
once it is healthy, and keeps it until ``stop`` or its lifetime ends) and stops them afterwards (:func:`stop`).
The session fixtures (``conftest.py``) take a server from ``$CARDGEN_TEST_SERVERS`` when one is there and healthy,
and start their own otherwise, so a test run alone, or a server that failed to start ahead, still gets one.

Each server is what its fixture would start (:data:`RECIPES`): the same engine, model, flags and environment.

Started ``in_idle_class``, the servers run in Linux's idle scheduling class (``SCHED_IDLE``): they take only the
CPU that the tests timing real sockets leave, and a fixture moves every process of the servers back to the normal
class (:func:`promote`) when it takes one, before any engine test times it. Only a process allowed to raise its
priority can do that (root, or an ``RLIMIT_NICE`` of 20): :func:`can_promote` says whether this one can.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # engine_helpers, run as a script

from engine_helpers import (  # noqa: E402  on the path set above
    LORA_ADAPTERS,
    SPEC_CONFIG,
    TINY_MAX_POSITIONS,
    VLLM_ARGS,
    make_lora_adapter,
    vllm_env,
)

STRUCTURED_ARGS = ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
                   "--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
# the other backend vLLM's CPU build constrains with (a backend must be named where whitespace is disabled, so each
# backend is a server of its own)
GUIDANCE_ARGS = ["--structured-outputs-config", '{"backend": "guidance", "disable_any_whitespace": true}']

# A last resort: the servers stop with the session that started them however it ends (tests/reaper.py), and this
# bounds them even where that could not run. make test took 16 min 25 s on a new machine, servers started first;
# on a slower one, busy with other work, the untimed tests alone took 21 min and the servers' 30 min ran out
# before the engine tests reached them (every request refused): an hour, within CI's 90 minutes.
LIFETIME_S = 60 * 60
WAIT_S = 300  # how long a fixture waits for a server still starting


@dataclass(frozen=True)
class Recipe:
    """How one of the session's servers is started: ``args(model)`` its engine arguments, ``model(tiny)`` the model
    it serves, made from the session's tiny model (None: that model itself)."""

    engine: str
    args: Callable[[Path], list[str]]
    model: Callable[[Path], Path] | None = None


def _launched(*extra: str) -> list[str]:
    """The session's vLLM arguments as ``--launch vllm`` completes them (per-request metrics), then ``extra``."""
    from cardgen.engines import get_adapter

    added, _ = get_adapter("vllm").launch_defaults([], VLLM_ARGS.split())
    return [*VLLM_ARGS.split(), *added, *extra]


def _plain(model: Path) -> list[str]:
    # structured outputs (xgrammar, no free whitespace: a random model would write whitespace until max_tokens) and
    # tool calls (tool_choice "required"; pythonic is the parser this vocabulary starts): the structured kind's
    # tests; requests without a constraint or tools are served as before
    return _launched(*STRUCTURED_ARGS)


def _guidance(model: Path) -> list[str]:
    return _launched(*GUIDANCE_ARGS)


def _features(model: Path) -> list[str]:
    from cardgen.engines import get_adapter
    from cardgen.engines.lora import LoraModule

    adapters = lora_adapters(model)
    modules = [LoraModule.parse(f"{name}={path}") for name, path in adapters.items()]
    return [*VLLM_ARGS.split(), *get_adapter("vllm").lora_args(modules), "--speculative-config", SPEC_CONFIG,
            "--reasoning-parser", "granite"]


VLM_SERVED = "tiny-vlm"
VLM_IMAGE_LIMIT = 2  # images per prompt the vision-language server allows (--limit-mm-per-prompt)


def _vlm(model: Path) -> list[str]:
    return ["--enforce-eager", "--distributed-executor-backend", "uni", "--served-model-name", VLM_SERVED, "--seed",
            "0", "--max-model-len", "4096", "--limit-mm-per-prompt", json.dumps({"image": VLM_IMAGE_LIMIT}),
            "--enable-per-request-metrics"]


def tiny_vlm(tiny: Path, *form: str) -> Path:
    """The tiny random Idefics3 made from the tiny model (``tiny_vlm.py``: ``hf``, or ``gguf BIN_DIR``), cached per
    machine; its path."""
    done = subprocess.run([sys.executable, str(HERE / "tiny_vlm.py"), *(form or ("hf", str(tiny)))],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"making the tiny vision-language model failed: {done.stderr.strip()[-600:]}")
    return Path(done.stdout.strip().splitlines()[-1])


RECIPES = {"vllm": Recipe("vllm", _plain), "vllm-features": Recipe("vllm", _features),
           "vllm-vlm": Recipe("vllm", _vlm, tiny_vlm), "vllm-guidance": Recipe("vllm", _guidance)}


def lora_adapters(model: Path) -> dict[str, Path]:
    """The tiny model's LoRA adapters (``engine_helpers.LORA_ADAPTERS``), by name; made once, beside it."""
    return {name: make_lora_adapter(model, model.parent / f"{model.name}-lora-{name}", rank=rank, targets=targets,
                                    seed=seed) for name, rank, targets, seed in LORA_ADAPTERS}


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def serving(where: Path) -> bool:
    """Whether the process that starts and keeps the servers is alive."""
    try:
        os.kill(int((where / "pid").read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def started_ahead(name: str) -> dict[str, Any] | None:
    """The server ``name`` started ahead (``url``, ``launch_info``, ``start_s``, ``tmp``), waiting while it is
    still starting; None when there is none, it failed, or it does not answer."""
    where = os.environ.get("CARDGEN_TEST_SERVERS")
    if not where:
        return None
    ready, failed = Path(where) / f"{name}.json", Path(where) / f"{name}.failed"
    deadline = time.monotonic() + WAIT_S
    while not ready.is_file():
        if failed.is_file() or not serving(Path(where)) or time.monotonic() > deadline:
            return None
        time.sleep(0.5)
    state = json.loads(ready.read_text())
    promote(Path(where))
    return state if healthy(state["url"]) else None


def can_promote() -> bool:
    """Whether this process may move a process from the idle scheduling class back to the normal one."""
    return hasattr(os, "SCHED_IDLE") and (os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20)


def idle() -> None:
    """This process (and what it starts from now on) into the idle scheduling class."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (an engine runs in a session of its own, so not by process group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


ENGINE_NICE = 10
ENGINE_PROCESSES = ("VLLM::",)  # vLLM's engine core and its worker: the processes that run the model


def engine_behind(root: int) -> None:
    """The engine started as process ``root`` (and everything below it) behind the load generator on the two
    shared cores: its autogroup at nice :data:`ENGINE_NICE` (an engine runs in a session of its own, and where
    Linux groups a session's processes, as here, a process's own nice value weighs only inside its group), and
    every thread of its model-running processes at that nice too (where sessions are not grouped).

    While vLLM decodes, its engine core and worker take about 1.8 of the 2 cores. At the same priority the load
    generator's process waited on the run queue for most of each second: its event loop lagged 0.2 to 0.6 s,
    a stream's chunks were read all at once at its end, and the client's share of TTFT read 0.06 to 0.2 s. With
    the engine's autogroup at nice 10 the lag was 1 to 4 ms and the client's share 2 to 4 ms (the engine stamps
    its own times, so its figures stay its own); its threads' nice alone changed nothing."""
    _behind(_descendants(root))


def _behind(pids: list[int]) -> None:
    """:func:`engine_behind` for the processes ``pids``."""
    for pid in pids:  # each engine below the servers' process has a session of its own
        with contextlib.suppress(OSError):  # no autogroups (CONFIG_SCHED_AUTOGROUP off), or the process ended
            if os.getsid(pid) != os.getsid(0):  # never the group of the tests and the load generator
                Path(f"/proc/{pid}/autogroup").write_text(f"{ENGINE_NICE}\n")
        with contextlib.suppress(OSError):
            if not Path(f"/proc/{pid}/comm").read_text().startswith(ENGINE_PROCESSES):
                continue
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError):  # a thread that ended
                os.setpriority(os.PRIO_PROCESS, int(task.name), ENGINE_NICE)


def promote(where: Path) -> None:
    """Every thread of the servers' processes back to the normal scheduling class (a no-op when they run in it),
    the engine's own behind the load generator (:func:`engine_behind`)."""
    with contextlib.suppress(OSError, ValueError):
        pids = _descendants(int((where / "pid").read_text()))
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError):  # a thread that ended, or no right to (see can_promote)
                    os.sched_setscheduler(int(task.name), os.SCHED_OTHER, os.sched_param(0))
        _behind(pids)


def serve(where: Path, cache: Path) -> None:
    """Start every recipe's server (one after another), say each is ready, and keep them until told to stop."""
    from cardgen.engines import launched_engine  # here: the script's other commands need none of cardgen
    from cardgen.engines.tinymodel import make_tiny_model  # the same

    stop = where / "stop"
    signal.signal(signal.SIGTERM, lambda *_: stop.touch())
    born = time.monotonic()
    model = make_tiny_model(cache, max_positions=TINY_MAX_POSITIONS)
    with contextlib.ExitStack() as servers:
        for name, recipe in RECIPES.items():
            if stop.exists():
                break
            tmp = where / name
            tmp.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            try:
                served = recipe.model(model) if recipe.model is not None else model
                handle = servers.enter_context(launched_engine(
                    recipe.engine, str(served), engine_args=recipe.args(served), log_path=tmp / "server.log",
                    env=vllm_env(tmp), startup_timeout_s=300))
            except Exception as exc:  # the fixture starts its own, and says why in its failure if that fails too
                (where / f"{name}.failed").write_text(f"{type(exc).__name__}: {exc}")
                continue
            state = {"url": handle.url, "launch_info": handle.launch_info, "start_s": time.monotonic() - started,
                     "tmp": str(tmp)}
            (where / f"{name}.json.part").write_text(json.dumps(state, default=str))
            (where / f"{name}.json.part").rename(where / f"{name}.json")
        while not stop.exists() and time.monotonic() - born < LIFETIME_S:
            time.sleep(0.5)


def start(where: Path, cache: Path, *, in_idle_class: bool = False) -> None:
    """Start the servers in a process of their own (in the idle scheduling class with ``in_idle_class``)."""
    where.mkdir(parents=True, exist_ok=True)
    for old in where.glob("*"):
        if old.is_file():
            old.unlink()
    log = (where / "servers.log").open("w")
    proc = subprocess.Popen([sys.executable, __file__, "serve", str(where), str(cache)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=idle if in_idle_class else None)
    (where / "pid").write_text(str(proc.pid))
    print(f"engine servers starting ahead in {where} (pid {proc.pid}{', idle class' if in_idle_class else ''})")


def stop(where: Path) -> None:
    pid_file = where / "pid"
    if not pid_file.is_file():
        return
    pid = int(pid_file.read_text())
    (where / "stop").touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


if __name__ == "__main__":
    command, where = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        start(where, Path(sys.argv[3]))
    elif command == "serve":
        serve(where, Path(sys.argv[3]))
    elif command == "stop":
        stop(where)
    else:
        sys.exit(f"usage: {sys.argv[0]} start|serve|stop DIR [CACHE]")
