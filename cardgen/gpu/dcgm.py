"""Reading GPUs through NVIDIA's DCGM exporter (``--gpu-metrics-url``): the GPU is on another host, its exporter
publishes Prometheus text. Pure parsing here; the sampler process does the HTTP.

Fields (dcgm-exporter's default set): ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` / ``_FREE`` /
``_RESERVED`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since the
driver loaded), labels ``gpu``, ``UUID``, ``modelName``, and ``DCGM_FI_DRIVER_VERSION`` where configured.
"""

from __future__ import annotations

import time
from typing import Any

from cardgen.promtext import parse_metrics

MIB = 1024 * 1024


def _by_gpu(samples: dict[str, list[dict[str, Any]]], name: str) -> dict[str, tuple[float, dict[str, str]]]:
    # a counter typed as such gets `_total` added by the Prometheus parser; an untyped one does not
    out: dict[str, tuple[float, dict[str, str]]] = {}
    for key in (name, f"{name}_total"):
        for sample in samples.get(key, ()):
            labels = sample.get("labels") or {}
            gpu = str(labels.get("gpu", labels.get("UUID", "0")))
            if sample.get("value") is not None and gpu not in out:
                out[gpu] = (float(sample["value"]), labels)
    return out


def _gpu_index(gpu: str) -> int | str:
    return int(gpu) if gpu.isdigit() else gpu


def parse_dcgm(text: str, *, t: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(inventory, records)`` from one scrape of a DCGM exporter; records match the NVML sampler's."""

    samples = parse_metrics(text)
    now = time.time() if t is None else t
    util = _by_gpu(samples, "DCGM_FI_DEV_GPU_UTIL")
    mem_copy = _by_gpu(samples, "DCGM_FI_DEV_MEM_COPY_UTIL")
    used = _by_gpu(samples, "DCGM_FI_DEV_FB_USED")
    free = _by_gpu(samples, "DCGM_FI_DEV_FB_FREE")
    reserved = _by_gpu(samples, "DCGM_FI_DEV_FB_RESERVED")
    power = _by_gpu(samples, "DCGM_FI_DEV_POWER_USAGE")
    energy = _by_gpu(samples, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    gpus = sorted(set(util) | set(used) | set(power) | set(energy), key=lambda g: (not g.isdigit(), g.zfill(8)))

    def val(table: dict[str, tuple[float, dict[str, str]]], gpu: str) -> float | None:
        return table[gpu][0] if gpu in table else None

    records, inv_gpus, drivers = [], [], set()
    for gpu in gpus:
        labels: dict[str, str] = {}
        for table in (util, used, power, energy):
            if gpu in table:
                labels = table[gpu][1]
                break
        if labels.get("DCGM_FI_DRIVER_VERSION"):
            drivers.add(labels["DCGM_FI_DRIVER_VERSION"])
        used_mib, free_mib, res_mib = val(used, gpu), val(free, gpu), val(reserved, gpu)
        total = (used_mib + free_mib + (res_mib or 0.0)) * MIB if used_mib is not None and free_mib is not None \
            else None
        records.append({
            "t": now,
            "gpu": _gpu_index(gpu),
            "source": "dcgm",
            "util_pct": val(util, gpu),
            "mem_util_pct": val(mem_copy, gpu),
            "mem_used_bytes": int(used_mib * MIB) if used_mib is not None else None,
            "mem_total_bytes": int(total) if total is not None else None,
            "power_w": val(power, gpu),
            "energy_mj": val(energy, gpu),
        })
        inv_gpus.append({"index": _gpu_index(gpu), "name": labels.get("modelName"), "uuid": labels.get("UUID"),
                         "memory_total_bytes": int(total) if total is not None else None,
                         "host": labels.get("Hostname")})
    names = sorted({str(g["name"]) for g in inv_gpus if g["name"]})
    inventory = {
        "source": "dcgm",
        "name": (names[0] if len(names) == 1 else " + ".join(names)) if names else None,
        "count": len(inv_gpus),
        "driver": drivers.pop() if len(drivers) == 1 else None,
        "memory_total_bytes": inv_gpus[0]["memory_total_bytes"] if inv_gpus else None,
        "gpus": inv_gpus,
    }
    return inventory, records
