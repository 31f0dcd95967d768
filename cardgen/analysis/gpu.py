"""The card's GPU figures: what ``gpu_metrics.jsonl`` says over the measured window, or why nothing is known.

Pure: the records arrive parsed (:class:`cardgen.analysis.rundata.RunData`); the figures themselves come from
:func:`cardgen.gpu.summarize_gpu`. Nothing is invented: without telemetry the reason is ``run.json``'s
``gpu.reason`` word for word, or the name of the missing file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cardgen.gpu import summarize_gpu
from cardgen.rundir import GPU_METRICS_JSONL
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import GpuReading, GpuTelemetry


def measured_window(requests: pd.DataFrame, info: RunInfo) -> tuple[float | None, float | None]:
    """First send to last end over every recorded request (warm-ups included: the GPU worked on them too);
    the run's own start and end when it recorded no request."""
    if not requests.empty:
        ends = requests["end_at"].to_numpy(dtype=float)
        sends = requests["sent_at"].to_numpy(dtype=float)
        last = np.nanmax(np.where(np.isfinite(ends), ends, sends))
        return float(np.nanmin(sends)), float(last)
    return info.started_unix, info.ended_unix


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def modelled_gpu_name(info: RunInfo) -> str | None:
    """The name of the GPU a modelled run modelled: run.json's ``gpu``, else the virtual server's own. (Its
    ``sim.gpu`` is how to start that server again: for a GPU of one's own, the file's path, not a name.)"""
    perf = info.sim.perf if info.sim is not None else {}
    for value in (info.gpu.name, perf.get("gpu"), info.sim.gpu if info.sim is not None else None):
        if isinstance(value, Mapping):
            value = value.get("name") or value.get("id")
        if value not in (None, ""):
            return str(value)
    return None


def gpu_telemetry(info: RunInfo, records: Sequence[Mapping[str, Any]], requests: pd.DataFrame) -> GpuTelemetry:
    """Name, count, driver, peak memory, mean utilization, energy and J per output token over the measured
    window, from the GPU sampler's records and ``run.json``'s ``gpu`` inventory."""
    if info.modelled:
        return GpuTelemetry(status="modelled", name=modelled_gpu_name(info),
                            reason="the GPU is modelled by cardgen's virtual GPU server: there is no telemetry")
    inventory = info.gpu
    base: dict[str, Any] = {
        "source": _text(inventory.source), "name": _text(inventory.name), "name_source": _text(inventory.name_source),
        "count": _int(inventory.count),
        "driver": _text(inventory.driver), "memory_total_bytes": _int(inventory.memory_total_bytes),
    }
    if not records:
        reason = inventory.reason or f"{GPU_METRICS_JSONL} is missing or empty, and run.json gives no reason"
        return GpuTelemetry(status="no_telemetry", reason=reason, **base)
    start, end = measured_window(requests, info)
    ok = requests[requests["ok"]] if not requests.empty else requests
    tokens = int(np.nansum(ok["output_tokens"].to_numpy(dtype=float))) if len(ok) else 0
    g = summarize_gpu(records, tokens, start_unix=start, end_unix=end)
    failures: dict[str, Any] = {"failed_samples": int(g["failed_samples"]), "failed_reads": int(g["failed_reads"]),
                "failure_kinds": list(g["failure_kinds"])}
    if not g.get("available"):
        reason = f"{GPU_METRICS_JSONL} has no sample inside the measured window"
        if failures["failed_samples"]:
            reason = (f"every one of the {failures['failed_samples']} samples inside the measured window failed "
                      f"({', '.join(failures['failure_kinds'])})")
        return GpuTelemetry(status="no_telemetry", window_start_unix=start, window_end_unix=end, reason=reason,
                            **failures, **base)
    if base["count"] is None:
        base["count"] = int(g["gpu_count"])
    if base["source"] is None:
        sources = sorted({str(r["source"]) for r in records if isinstance(r, Mapping) and r.get("source")})
        base["source"] = " + ".join(sources) or None
    per_gpu = [GpuReading(gpu=p["gpu"] if isinstance(p["gpu"], int | str) else str(p["gpu"]),
                          peak_memory_bytes=_int(p["peak_memory_bytes"]),
                          mean_utilization_pct=p["mean_utilization_pct"], mean_power_w=p["mean_power_w"],
                          energy_j=p["energy_j"], samples=int(p["samples"])) for p in g["per_gpu"]]
    return GpuTelemetry(
        status="measured", window_start_unix=start, window_end_unix=end, samples=int(g["samples"]),
        duration_s=g["duration_s"], peak_memory_bytes=_int(g["peak_memory_bytes"]),
        peak_memory_total_bytes=_int(g["peak_memory_total_bytes"]),
        mean_utilization_pct=g["mean_utilization_pct"], mean_power_w=g["mean_power_w"], energy_j=g["energy_j"],
        energy_source=g["energy_source"], output_tokens=tokens, j_per_output_token=g["j_per_output_token"],
        per_gpu=per_gpu, **failures, **base)
