"""The measured server's own scheduler settings: read, not fitted.

What the server says of itself goes through its engine adapter
(:meth:`cardgen.engines.base.EngineAdapter.scheduler_settings`: vLLM's cache config, the launch arguments, the
engine's log, its documented defaults); its context length through ``/v1/models``. A setting the server does not
say is taken from the starting engine profile on the named GPU, and its source says so: the card lists every
setting with where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cardgen.engines import get_adapter
from cardgen.engines.base import samples_of
from cardgen.schemas.calibration import ServerSetting
from cardgen.schemas.records import MetricSample
from cardgen.schemas.run import ServerInfo
from cardgen.sim.hardware import GPU
from cardgen.sim.roofline import LARGE_GPU_BYTES, RooflinePerf

NAMES = ("kv_capacity_tokens", "block_size", "max_num_seqs", "max_num_batched_tokens", "chunked_prefill",
         "max_model_len")


@dataclass(frozen=True)
class ServerSettings:
    """The scheduler the fitted virtual server runs with: the measured server's own."""

    kv_capacity_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    max_model_len: int
    sources: Mapping[str, str] = field(default_factory=dict)

    def described(self) -> list[ServerSetting]:
        """run.json's ``calibration.settings``."""
        return [ServerSetting(name=name, value=getattr(self, name), source=self.sources.get(name, "")) for name in NAMES]


def device_class(gpu: GPU) -> str:
    """How an engine's defaults see ``gpu``: ``large-gpu`` (70 GiB or more, not an A100, as vLLM decides) or
    ``gpu``."""
    large = gpu.memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower()
    return "large-gpu" if large else "gpu"


def read_settings(server: ServerInfo, scrapes: Sequence[MetricSample], *, start: RooflinePerf,
                  start_label: str) -> ServerSettings:
    """The settings ``server`` (as probed) and its last scrape of ``/metrics`` say; the rest from ``start`` (the
    starting profile's model of the server), each with its source. ``start_label`` names that model in words."""
    last = next((s for s in reversed(scrapes) if s.error is None and s.samples), None)
    samples = samples_of(last) if last is not None else {}
    launch = server.launch.model_dump() if server.launch is not None else None
    said = get_adapter(server.engine).scheduler_settings(samples, server.extra, launch,
                                                         version=server.engine_version, device=device_class(start.gpu))
    assumed = f"assumed: {start_label} (the server does not say)"
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    fallback = {"kv_capacity_tokens": start.kv_capacity_tokens, "block_size": start.block_size,
                "max_num_seqs": start.max_num_seqs, "max_num_batched_tokens": start.max_num_batched_tokens,
                "chunked_prefill": start.chunked_prefill}
    for name, value in fallback.items():
        values[name], sources[name] = said.get(name, (value, assumed))
    context = server.context_length()
    values["max_model_len"], sources["max_model_len"] = ((context, "/v1/models max_model_len") if context else
                                                         (start.max_model_len, assumed))
    block = int(values["block_size"])
    kv = int(values["kv_capacity_tokens"]) // block * block
    return ServerSettings(kv_capacity_tokens=kv, block_size=block,
                          max_num_seqs=int(values["max_num_seqs"]),
                          max_num_batched_tokens=int(values["max_num_batched_tokens"]),
                          chunked_prefill=bool(values["chunked_prefill"]),
                          max_model_len=min(int(values["max_model_len"]), kv),
                          sources=sources)

