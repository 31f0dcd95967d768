"""GPUs the virtual server models: datasheet peak, bandwidth, memory and GPU-to-GPU link (``data/gpus.yaml``), or
a GPU of one's own from a small YAML file (``--gpu my-gpu.yaml``, :func:`load_gpu_file`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from cardgen.errors import UsageError
from cardgen.sim.catalog import read_data, read_user_file, resolve

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
    arch: str = ""  # architecture generation (ampere, ada, hopper, ...): which kernels an engine has for it
    price_per_hour: float | None = None  # USD per GPU-hour, when a GPU file says so (the card's costs)

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


def is_gpu_file(name: str) -> bool:
    """Whether ``--gpu`` names a YAML file rather than a preset."""
    return name.lower().endswith((".yaml", ".yml"))


def find_gpu(name: str) -> GPU:
    """The GPU ``name`` means: a preset (case-insensitive; aliases such as ``A100`` or ``H100-SXM``) or a YAML
    file (:func:`load_gpu_file`). Raises :class:`UsageError` listing the known names when there is none."""
    if is_gpu_file(name):
        return load_gpu_file(Path(name))
    gpus = read_data("gpus.yaml")
    entry = resolve(name, gpus)
    if entry is None:
        raise UsageError(f"unknown GPU {name!r}: known GPUs are {', '.join(list_gpus())} "
                         "(or describe yours in a .yaml file: memory_gb, bandwidth_gb_s, peak_tflops)")
    return _gpu(entry, gpus[entry], source=f"cardgen/sim/data/gpus.yaml ({entry})")


# A GPU file: the three required numbers, and what may be said besides (anything else is a typo: an error).
_REQUIRED = ("memory_gb", "bandwidth_gb_s", "peak_tflops")
_OPTIONAL = ("name", "description", "memory_gib", "link", "arch", "price_per_hour")
_LINK_KEYS = ("name", "bandwidth_gb_s", "latency_us")
# Without a link: PCIe 4.0 x16, the slowest link of the presets.
_DEFAULT_LINK = {"name": "PCIe 4.0 x16 (assumed)", "bandwidth_gb_s": 25, "latency_us": 25}


def load_gpu_file(path: Path) -> GPU:
    """A GPU described in a YAML file::

        name: my-gpu              # optional (default: the file name)
        memory_gb: 96             # memory as sold, 1e9 bytes
        bandwidth_gb_s: 4000      # memory bandwidth, 1e9 bytes/s
        peak_tflops: 900          # dense 16-bit tensor peak
        memory_gib: 94.5          # optional: what CUDA reports (default: memory_gb in GiB)
        arch: hopper              # optional: the architecture, for engine profiles' arch_compute_factor
        link: {name: ..., bandwidth_gb_s: ..., latency_us: ...}   # optional (default: PCIe 4.0 x16)
        price_per_hour: 2.49      # optional: USD per GPU-hour, for the card's cost per million tokens

    Raises :class:`UsageError` (one line) for a missing file, bad YAML, unknown keys or non-positive numbers."""
    text = read_user_file(path, "GPU file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"GPU file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"GPU file {path} must be a mapping with {', '.join(_REQUIRED)}")
    unknown = sorted(set(map(str, data)) - set(_REQUIRED) - set(_OPTIONAL))
    missing = [k for k in _REQUIRED if k not in data]
    if unknown or missing:
        what = "; ".join(p for p in (f"unknown key(s) {', '.join(unknown)}" if unknown else "",
                                     f"missing {', '.join(missing)}" if missing else "") if p)
        raise UsageError(f"GPU file {path}: {what} (keys: {', '.join(_REQUIRED + _OPTIONAL)})")
    link = data.get("link", _DEFAULT_LINK)
    if not isinstance(link, dict) or sorted(map(str, link)) != sorted(_LINK_KEYS):
        raise UsageError(f"GPU file {path}: link must have exactly {', '.join(_LINK_KEYS)}")
    spec = {**data, "link": link}
    spec.setdefault("memory_gib", _number(data, "memory_gb", path) * 1e9 / GIB)
    name = str(data.get("name") or Path(path).stem)
    return _gpu(name, spec, source=str(path))


def _number(spec: dict[str, Any], key: str, source: object) -> float:
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UsageError(f"GPU {source}: {key} must be a positive number, not {value!r}")
    return float(value)


def _gpu(name: str, g: dict[str, Any], *, source: str) -> GPU:
    link = g["link"]
    return GPU(
        name=name,
        description=str(g.get("description", name)),
        peak_flops=_number(g, "peak_tflops", source) * 1e12,
        bandwidth_bytes_s=_number(g, "bandwidth_gb_s", source) * 1e9,
        memory_bytes=_number(g, "memory_gib", source) * GIB,
        memory_gb=_number(g, "memory_gb", source),
        link_name=str(link["name"]),
        link_bandwidth_bytes_s=_number(link, "bandwidth_gb_s", source) * 1e9,
        link_latency_s=_number(link, "latency_us", source) * 1e-6,
        arch=str(g.get("arch", "")).lower(),
        price_per_hour=_price(g, source),
    )


def _price(spec: dict[str, Any], source: object) -> float | None:
    value = spec.get("price_per_hour")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise UsageError(f"GPU {source}: price_per_hour must be US dollars per GPU-hour, 0 or more, not {value!r}")
    return float(value)
