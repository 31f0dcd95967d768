"""GPUs the virtual server models: datasheet peak, bandwidth, memory and GPU-to-GPU link (``data/gpus.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cardgen.errors import UsageError
from cardgen.sim.catalog import read_data, resolve

GIB = 2**30


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU's roofline: what it can compute, read and hold, and how fast it talks to its peers."""

    name: str
    description: str
    peak_flops: float  # dense 16-bit tensor FLOP/s
    bandwidth_bytes_s: float  # memory bandwidth
    memory_bytes: float  # total memory as CUDA reports it (what gpu_memory_utilization is a fraction of)
    memory_gb: float  # as sold, for display
    link_name: str
    link_bandwidth_bytes_s: float  # per direction, per GPU
    link_latency_s: float  # one small all-reduce

    def allreduce_s(self, nbytes: float, tp: int) -> float:
        """Seconds of one ring all-reduce of ``nbytes`` over ``tp`` GPUs (0 for one GPU)."""
        if tp <= 1:
            return 0.0
        return self.link_latency_s + 2 * (tp - 1) / tp * nbytes / self.link_bandwidth_bytes_s

    def describe(self) -> dict[str, object]:
        return asdict(self)


def list_gpus() -> list[str]:
    """Names of the GPUs the virtual server can model."""
    return list(read_data("gpus.yaml"))


def find_gpu(name: str) -> GPU:
    """The GPU ``name`` means (case-insensitive; aliases such as ``A100`` or ``H100-SXM``). Raises
    :class:`UsageError` listing the known names when there is none."""
    gpus = read_data("gpus.yaml")
    entry = resolve(name, gpus)
    if entry is None:
        raise UsageError(f"unknown GPU {name!r}: known GPUs are {', '.join(list_gpus())}")
    g = gpus[entry]
    link = g["link"]
    return GPU(
        name=entry,
        description=g.get("description", entry),
        peak_flops=float(g["peak_tflops"]) * 1e12,
        bandwidth_bytes_s=float(g["bandwidth_gb_s"]) * 1e9,
        memory_bytes=float(g["memory_gib"]) * GIB,
        memory_gb=float(g["memory_gb"]),
        link_name=link["name"],
        link_bandwidth_bytes_s=float(link["bandwidth_gb_s"]) * 1e9,
        link_latency_s=float(link["latency_us"]) * 1e-6,
    )
