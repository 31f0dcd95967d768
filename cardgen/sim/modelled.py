"""A modelled server: the virtual GPU server ``cardgen build MODEL`` measures when it is given no server, and
its run in virtual time.

:class:`ModelledServer` is what the command line asks to model (model, GPU, tensor parallel, engine profile) and
how to start it again (``cardgen resume`` of a ``--real-time`` run). :func:`modelled_run` computes a suite's run
on it in virtual time (:mod:`cardgen.sim.drive`, the same scenario programs and controller the load engine
runs), with the step jitter of :data:`MODELLED_STEP_JITTER`, and writes the run directory ``cardgen render``
reads: a full suite in seconds, where measuring the virtual server over HTTP takes as long as a real run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cardgen.errors import UsageError
from cardgen.schemas.run import RunInfo
from cardgen.sim.config import SimConfig, build_perf
from cardgen.sim.drive import DriveOptions, SimulatedRun, simulate_run
from cardgen.sim.hardware import is_gpu_file, load_gpu_file
from cardgen.sim.roofline import list_engines
from cardgen.suite import Suite

#: the modelled run's steps vary by this relative standard deviation around the model's: about a steady real
#: server's noise, so precision targets stop about where they would on one (the plan uses the same)
MODELLED_STEP_JITTER = 0.02


def modelled_options(*, start_unix: float, scrapes: bool = True) -> DriveOptions:
    """How a modelled run (and its plan) is timed: the same for both, so a plan lists what a build runs."""
    return DriveOptions(start_unix=start_unix, step_jitter=MODELLED_STEP_JITTER, scrapes=scrapes)


def check_engine_profile(engine: str) -> str:
    """``engine`` if it names an engine profile of the virtual server; else a one-line UsageError."""
    known = list_engines()
    match = next((name for name in known if name.lower() == engine.strip().lower()), None)
    if match is None:
        raise UsageError(f"unknown engine profile {engine!r}: the virtual server models {', '.join(known)}")
    return match


@dataclass(frozen=True, kw_only=True)
class ModelledServer:
    """The built-in virtual GPU server as the command line describes it."""

    model: str
    gpu: str
    tp: int = 1
    model_config: Path | None = None
    engine: str = "vllm"  # the engine profile

    def check(self) -> None:
        """A one-line UsageError, before anything runs, for an unknown model, GPU or engine profile, or a missing
        config file."""
        if self.model_config is not None and not self.model_config.is_file():
            raise UsageError(f"--model-config {self.model_config} does not exist")
        if self.tp < 1:
            raise UsageError("--tp must be 1 or more")
        check_engine_profile(self.engine)
        build_perf(self.config())

    def config(self) -> SimConfig:
        return SimConfig(model=self.model, gpu=self.gpu, tp=self.tp, model_config=self.model_config,
                         engine=check_engine_profile(self.engine))

    @property
    def gpu_name(self) -> str:
        """The GPU's name for the card: a preset's, or a GPU file's own ``name`` (else its file name), never the
        file's path."""
        return load_gpu_file(Path(self.gpu)).name if is_gpu_file(self.gpu) else self.gpu

    @property
    def argv(self) -> list[str]:
        """``cardgen serve-sim``'s arguments for this server, without its address."""
        argv = [self.model, "--gpu", self.gpu, "--tp", str(self.tp), "--engine", self.engine]
        if self.model_config is not None:
            argv += ["--model-config", str(self.model_config)]
        return argv

    def describe(self, described: Mapping[str, Any]) -> dict[str, Any]:
        """run.json's ``sim``: the server's own description, and how to start it again."""
        sim = dict(described)
        if self.model_config is not None:
            sim["model_config"] = str(self.model_config.resolve())
        return sim

    def gpu_info(self) -> dict[str, Any]:
        """run.json's ``gpu`` of a modelled run."""
        return {"name": self.gpu_name, "count": self.tp, "modelled": True}

    @classmethod
    def of_run(cls, info: RunInfo, *, model_config: Path | None = None) -> ModelledServer:
        """The virtual server a modelled run measured, from run.json's ``sim`` (``model_config`` replaces the
        one it names)."""
        sim = info.sim or {}
        gpu, tp, config = sim.get("gpu"), sim.get("tp", 1), model_config or sim.get("model_config")
        if not isinstance(gpu, str) or not isinstance(tp, int):
            raise UsageError("run.json does not say which virtual server the run measured (its 'sim' names no GPU): "
                             "give --url of a server to resume against")
        engine = sim.get("engine_profile")
        return cls(model=str(sim.get("model") or info.model), gpu=gpu, tp=tp,
                   model_config=Path(config) if config else None,
                   engine=engine if isinstance(engine, str) else "vllm")


def modelled_run(server: ModelledServer, suite: Suite, run_dir: Path, *, argv: Sequence[str], started_unix: float,
                 run_saturated: bool = False) -> SimulatedRun:
    """``suite`` on ``server``, in virtual time from ``started_unix``, written to ``run_dir`` (run.json says
    ``clock: virtual`` and ``modelled``)."""
    config = server.config()
    perf = build_perf(config)
    return simulate_run(suite, config, perf=perf, options=modelled_options(start_unix=started_unix),
                        command=argv, run_dir=run_dir, run_saturated=run_saturated,
                        sim=server.describe({}), gpu=server.gpu_info())
