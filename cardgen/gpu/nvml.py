"""Reading GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``): inventory and one sample per device.

Every function takes the NVML module as an argument so tests can hand in a stand-in. NVML calls block in C:
they run in the sampler's own process (``cardgen.gpu.sampler``), never in the load generator's event loop.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import sys
import time
from types import ModuleType
from typing import Any

NO_TELEMETRY = "no GPU telemetry"
LIBRARY_NOT_FOUND = "NVML library not found"


def _not_installed(module: str) -> str:
    return f"{NO_TELEMETRY}: nvidia-ml-py ({module}) is not installed"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def load_nvml(module: str = "pynvml") -> tuple[ModuleType | None, str | None]:
    """Import and initialise NVML. Returns ``(nvml, None)``, or ``(None, reason)`` where ``reason`` says why
    there is no GPU telemetry ("no GPU telemetry: NVML library not found")."""
    try:
        nvml = importlib.import_module(module)
    except ImportError:
        return None, _not_installed(module)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses are made at run time
        return None, f"{NO_TELEMETRY}: {nvml_reason(nvml, exc)}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as exc:
        _shutdown(nvml)
        return None, f"{NO_TELEMETRY}: {nvml_reason(nvml, exc)}"
    if count == 0:
        _shutdown(nvml)
        return None, f"{NO_TELEMETRY}: NVML found no GPU"
    return nvml, None


def nvml_absent(module: str = "pynvml") -> str | None:
    """Why NVML cannot work here, found without calling it (so without blocking): the module is not installed,
    or (nvidia-ml-py on Linux) ``libnvidia-ml.so.1`` does not load, as ``nvmlInit`` loads it. None where it may
    work: only the sampler's own process then finds out. The reasons are :func:`load_nvml`'s, word for word."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return _not_installed(module)
    if module == "pynvml" and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return f"{NO_TELEMETRY}: {LIBRARY_NOT_FOUND}"
    return None


def nvml_reason(nvml: Any, exc: BaseException) -> str:
    """A short reason for an NVML failure."""
    known = (
        ("NVMLError_LibraryNotFound", LIBRARY_NOT_FOUND),
        ("NVMLError_DriverNotLoaded", "NVIDIA driver not loaded"),
        ("NVMLError_NoPermission", "no permission to use NVML"),
        ("NVMLError_InsufficientPower", "a GPU reports insufficient power"),
    )
    for attr, text in known:
        cls = getattr(nvml, attr, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return text
    return f"NVML error: {exc}"


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # nothing to do about a failing shutdown
        pass


def _not_supported(nvml: Any, exc: BaseException) -> bool:
    cls = getattr(nvml, "NVMLError_NotSupported", None)
    return isinstance(cls, type) and isinstance(exc, cls)


def _try(nvml: Any, fn: Any, *args: Any) -> Any:
    """An NVML query, or None where the device does not support it (``NVMLError_NotSupported``, common on
    consumer GPUs: the figure is simply not there). Any other error is raised: a GPU that fails to describe
    itself is reported as the reason there is no telemetry, not taken for a device without the feature."""
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError subclasses are made at run time
        if _not_supported(nvml, exc):
            return None
        raise


def _read(nvml: Any, fn: Any, handle: Any, field: str, errors: dict[str, str]) -> Any:
    """A sample's NVML query: None where unsupported; None and ``errors[field]`` (the reason) when it failed.
    Not raised: one failed read (a busy driver, a lost GPU) must not end the sampler and every figure after it;
    the record says which field failed and why, and the card counts them."""
    try:
        return _try(nvml, fn, handle)
    except Exception as exc:
        errors[field] = nvml_reason(nvml, exc)
        return None


def inventory(nvml: Any) -> dict[str, Any]:
    """Name, count, driver and memory of the GPUs NVML sees."""
    count = int(nvml.nvmlDeviceGetCount())
    gpus = []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = _try(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        limit = _try(nvml, nvml.nvmlDeviceGetPowerManagementLimit, handle)
        gpus.append({
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "uuid": _text(u) if (u := _try(nvml, nvml.nvmlDeviceGetUUID, handle)) is not None else None,
            "memory_total_bytes": int(memory.total) if memory is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
        })
    driver = _try(nvml, nvml.nvmlSystemGetDriverVersion)
    cuda = _try(nvml, nvml.nvmlSystemGetCudaDriverVersion)
    names = sorted({str(g["name"]) for g in gpus})
    return {
        "source": "nvml",
        "name": names[0] if len(names) == 1 else " + ".join(names),
        "count": count,
        "driver": _text(driver) if driver is not None else None,
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        "memory_total_bytes": gpus[0]["memory_total_bytes"] if gpus else None,
        "gpus": gpus,
    }


def sample(nvml: Any, handles: list[Any], *, t: float | None = None) -> list[dict[str, Any]]:
    """One record per GPU: utilization (%), memory used (bytes), power (W), total energy (mJ, a counter); and
    ``errors`` (field: reason) when a query failed for another reason than not being supported."""
    now = time.time() if t is None else t
    out = []
    for index, handle in enumerate(handles):
        errors: dict[str, str] = {}
        util = _read(nvml, nvml.nvmlDeviceGetUtilizationRates, handle, "util_pct", errors)
        memory = _read(nvml, nvml.nvmlDeviceGetMemoryInfo, handle, "mem_used_bytes", errors)
        power_mw = _read(nvml, nvml.nvmlDeviceGetPowerUsage, handle, "power_w", errors)
        energy_mj = _read(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle, "energy_mj", errors)
        out.append({
            "t": now,
            "gpu": index,
            "source": "nvml",
            "util_pct": float(util.gpu) if util is not None else None,
            "mem_util_pct": float(util.memory) if util is not None else None,
            "mem_used_bytes": int(memory.used) if memory is not None else None,
            "mem_total_bytes": int(memory.total) if memory is not None else None,
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "energy_mj": float(energy_mj) if energy_mj is not None else None,
            **({"errors": errors} if errors else {}),
        })
    return out


def handles(nvml: Any) -> list[Any]:
    return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]


def shutdown(nvml: Any) -> None:
    _shutdown(nvml)
