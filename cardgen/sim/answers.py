"""What the virtual server says about itself (``/version``, ``/v1/models``, ``/cardgen/sim``), as pure functions
of its configuration: the HTTP server (:mod:`cardgen.sim.api`) answers with them, and the virtual-time driver's
probe (:func:`cardgen.sim.drive.probe_answer`) reads them without serving anything."""

from __future__ import annotations

from typing import Any

from cardgen import __version__
from cardgen.sim.config import SimConfig
from cardgen.sim.faults import FaultPlan
from cardgen.sim.perf import PerfModel
from cardgen.sim.scheduler import Scheduler

ENGINE_NAME = "cardgen-sim"


def version_answer() -> dict[str, Any]:
    """``GET /version``."""
    return {"version": __version__, "engine": ENGINE_NAME}


def models_answer(config: SimConfig, *, max_model_len: int, started_at: float) -> dict[str, Any]:
    """``GET /v1/models``: the one model served, with its context length."""
    card = {
        "id": config.model_name,
        "object": "model",
        "created": int(started_at),
        "owned_by": ENGINE_NAME,
        "root": config.model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [card]}


def describe(config: SimConfig, perf: PerfModel, scheduler: Scheduler, *, max_model_len: int, faults: FaultPlan,
             started_at: float, url: str | None, pid: int | None) -> dict[str, Any]:
    """``GET /cardgen/sim``: what the server models (``pid`` None: it ran in virtual time, in no process)."""
    return {
        "engine": ENGINE_NAME,
        "version": __version__,
        "modelled": True,
        "model": config.model,
        "served_model_name": config.model_name,
        "gpu": config.gpu if config.perf == "roofline" else None,
        "tp": config.tp,
        "engine_profile": config.engine,
        "perf": perf.describe(),
        "scheduler": {
            "policy": "chunked-prefill" if config.chunked_prefill else "prefill-first",
            "block_size": scheduler.block_size,
            "num_gpu_blocks": scheduler.total_blocks,
            "kv_cache_size_tokens": scheduler.total_blocks * scheduler.block_size,
            "max_num_seqs": scheduler.max_num_seqs,
            "max_num_batched_tokens": scheduler.max_num_batched_tokens,
            "max_model_len": max_model_len,
        },
        "eos_rate": config.eos_rate,
        **config.served.described(),
        "seed": config.seed,
        "faults": faults.spec() or None,
        "pid": pid,
        "started_at": started_at,
        "url": url,
    }
