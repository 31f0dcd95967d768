"""The cost plan of a run made beside it: ``cardgen plan --json`` in a process of its own while the server starts
and the load runs, read when it is done. Imports no load engine (so no Locust), and asks nothing of the server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

from cardgen.load.progress import PlannedTime
from cardgen.numbers import duration_text
from cardgen.sim.catalog import read_data, resolve
from cardgen.suite import Suite

#: how long a load that ended before its planner waits for the plan (the full suite plans in about 20 s of CPU)
PLAN_WAIT_S = 60.0


class BackgroundPlan:
    """``cardgen plan --json`` in a process of its own, started before the server so that it runs while the
    server starts and the load begins (planning the full suite takes about 20 s of CPU: in this process it
    would hold the GIL against the event loop that stamps chunk arrivals). Calling it answers at once: the
    plan once the process is done, None before (or when planning failed: the run goes on without).

    ``suite`` is a suite's name or file, or the suite itself (a resumed run's, from run.json); ``done`` names
    the points an earlier session finished: the line then says what is left."""

    def __init__(self, argv: Sequence[str], *, suite: str | Suite, modelled_as: str,
                 done: Collection[str] = ()) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="cardgen-plan-")
        self._out = Path(self._dir.name) / "plan.json"
        self.modelled_as, self.done = modelled_as, frozenset(done)
        self._result: PlannedTime | None = None
        self._finished = False
        self.given = False  # whether a caller has been given the plan
        if not isinstance(suite, str):
            path = Path(self._dir.name) / "suite.yaml"
            path.write_text(yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
            suite = str(path)
        with self._out.open("wb") as out:  # a file, not a pipe: a large plan never blocks the planner
            # at the lowest CPU priority: the plan must never take a core from the load it runs beside (the
            # client's timings are the measurement; a quick suite's plan is seconds of CPU at the load's start)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cardgen", "plan", *argv, "--suite", suite, "--json"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
        _lowest_priority(self.process.pid)

    def __call__(self) -> PlannedTime | None:
        if not self._finished and self.process.poll() is not None:
            self._finished = True
            if self.process.returncode == 0:
                self._result = self._read()
        if self._result is not None:
            self.given = True  # the progress display says its line when it is given the plan
        return self._result

    def after_load(self, wait_s: float = PLAN_WAIT_S) -> tuple[PlannedTime | None, bool]:
        """The plan once the load is done, waiting up to ``wait_s`` for the planner (a run shorter than its plan
        ends before the planner does), and whether its line is still to be said: the progress display never
        got it."""
        late = not self.given
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        planned = self()
        return planned, late and planned is not None

    def _read(self) -> PlannedTime | None:
        try:
            data = json.loads(self._out.read_text("utf-8"))
            points = data["points"]
            seconds = {str(p["name"]): 0.0 if p.get("skipped") else float(p["seconds"]) for p in points}
            gpu_time_s, tp = float(data["gpu_time_s"]), int(data["tp"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        left = [p for p in points if p["name"] not in self.done]
        running = sum(1 for p in left if not p.get("skipped"))
        skipped = len(left) - running
        if self.done:  # what is left: the points' own seconds (the pauses between them are left out)
            gpu_time_s = sum(seconds[p["name"]] for p in left) * tp
        line = (f"plan: {running} point{'' if running == 1 else 's'}" + (" left" if self.done else "")
                + (f" ({skipped} skipped at saturation)" if skipped else "")
                + f", ~{duration_text(gpu_time_s)} of GPU time ({self.modelled_as})")
        return PlannedTime(seconds_by_point=seconds, gpu_time_s=gpu_time_s, line=line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._dir.cleanup()


def _lowest_priority(pid: int) -> None:
    """The process ``pid`` at nice 19 (where the OS has priorities), so the load's processes come first."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


@contextmanager
def plan_in_background(suite: str | Suite, *, model: str, gpu: str, tp: int, model_config: Path | None,
                       modelled: bool, gpu_given: bool, done: Collection[str] = (),
                       engine: str = "vllm") -> Iterator[BackgroundPlan | None]:
    """The cost plan of the run while the block runs, when the model and GPU are known: always for the virtual
    server; for a real one only when the virtual server knows the model (a preset, or --model-config) and
    --gpu was given. None otherwise: nothing is said about a cost cardgen cannot model."""
    if not modelled:
        if not gpu_given or (model_config is None and resolve(model, read_data("models.yaml")) is None):
            yield None
            return
    argv = [model, "--gpu", gpu, "--tp", str(tp), "--engine", engine]
    if model_config is not None:
        argv += ["--model-config", str(model_config)]
    plan = BackgroundPlan(argv, suite=suite, done=done, modelled_as="modelled" if modelled else
                          f"modelled by the virtual server for {model} on {tp}x {gpu}")
    try:
        yield plan
    finally:
        plan.close()
