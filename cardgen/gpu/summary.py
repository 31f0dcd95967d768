"""What the card says about the GPUs, from ``gpu_metrics.jsonl``: pure functions, no I/O but the reader."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cardgen.rundir import GPU_METRICS_JSONL, read_jsonl


def read_gpu_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/gpu_metrics.jsonl`` ([] when there is none); a torn last line is left out
    (:func:`cardgen.rundir.read_jsonl`)."""
    path = Path(run_dir) / GPU_METRICS_JSONL
    return list(read_jsonl(path, None)) if path.is_file() else []


def failed_sample(t: float, source: str, error: str) -> dict[str, Any]:
    """The record of a sample that gave nothing (a DCGM scrape that failed): kept on disk, so it is counted."""
    return {"t": t, "source": source, "failed": error}


def _failures(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Samples that gave nothing and reads that failed (NVML errors other than "not supported"), with their
    kinds (the error's first words), for the card."""
    failed = [str(r["failed"]) for r in rows if r.get("failed")]
    reads = [str(e) for r in rows if isinstance(r.get("errors"), Mapping) for e in r["errors"].values()]
    kinds = sorted({e.split(":")[0] for e in failed + reads})
    return {"failed_samples": len(failed), "failed_reads": len(reads), "failure_kinds": kinds}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _edges_j(rows: list[Mapping[str, Any]], start: float | None, end: float | None) -> float:
    """The energy of the window's edges the samples do not cover: from its start to the first sample and from the
    last sample to its end, each at the power of that nearest sample (0 where it has none)."""
    power = [(r["t"], float(r["power_w"])) for r in rows if r.get("power_w") is not None]
    if not power:
        return 0.0
    head = max(0.0, power[0][0] - start) * power[0][1] if start is not None else 0.0
    tail = max(0.0, end - power[-1][0]) * power[-1][1] if end is not None else 0.0
    return head + tail


def _energy_j(rows: list[Mapping[str, Any]], start: float | None = None,
              end: float | None = None) -> tuple[float | None, str | None]:
    """Energy one GPU used over the window: the NVML/DCGM energy counter's increase between its first and last
    sample where it has one, else power integrated over time (trapezoids); both extended to the window's ends
    (``start``, ``end``) at the nearest samples' power (:func:`_edges_j`)."""
    counter = [(r["t"], r["energy_mj"]) for r in rows if r.get("energy_mj") is not None]
    if len(counter) >= 2 and counter[-1][1] >= counter[0][1]:
        return (counter[-1][1] - counter[0][1]) / 1000.0 + _edges_j(rows, start, end), "energy counter"
    power = [(r["t"], r["power_w"]) for r in rows if r.get("power_w") is not None]
    if len(power) >= 2:
        joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
        return joules + _edges_j(rows, start, end), "power integrated over time"
    return None, None


def summarize_gpu(records: Iterable[Mapping[str, Any]], output_tokens: int | None, *,
                  start_unix: float | None = None, end_unix: float | None = None) -> dict[str, Any]:
    """Peak memory, mean utilization, energy and energy per output token over the records (optionally only
    those between ``start_unix`` and ``end_unix``).

    Returns ``{"available": False}`` when there is nothing to summarise; otherwise ``gpu_count``,
    ``peak_memory_bytes`` (the highest of any one GPU), ``peak_memory_total_bytes`` (summed over GPUs at their
    own peaks), ``mean_utilization_pct`` (over GPUs and samples), ``energy_j`` (all GPUs), ``energy_source``,
    ``j_per_output_token``, ``mean_power_w``, ``duration_s`` and ``per_gpu``; and always ``failed_samples``
    (samples that gave nothing), ``failed_reads`` (fields a device failed to give) and ``failure_kinds``.
    """
    window = [r for r in records if isinstance(r, Mapping) and r.get("t") is not None
              and (start_unix is None or r["t"] >= start_unix) and (end_unix is None or r["t"] <= end_unix)]
    failures = _failures(window)
    rows = [r for r in window if not r.get("failed")]
    if not rows:
        return {"available": False, **failures}
    by_gpu: dict[Any, list[Mapping[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["t"]):
        by_gpu.setdefault(row.get("gpu", 0), []).append(row)

    per_gpu, utils, powers, sources = [], [], [], set()
    total_energy: float | None = 0.0
    for gpu, gpu_rows in by_gpu.items():
        mem = [r["mem_used_bytes"] for r in gpu_rows if r.get("mem_used_bytes") is not None]
        util = [float(r["util_pct"]) for r in gpu_rows if r.get("util_pct") is not None]
        power = [float(r["power_w"]) for r in gpu_rows if r.get("power_w") is not None]
        energy, source = _energy_j(gpu_rows, start_unix, end_unix)
        utils += util
        powers += power
        if source:
            sources.add(source)
        if energy is None:
            total_energy = None
        elif total_energy is not None:
            total_energy += energy
        per_gpu.append({"gpu": gpu, "peak_memory_bytes": max(mem) if mem else None,
                        "mean_utilization_pct": _mean(util), "mean_power_w": _mean(power), "energy_j": energy,
                        "samples": len(gpu_rows)})
    peaks = [g["peak_memory_bytes"] for g in per_gpu if g["peak_memory_bytes"] is not None]
    tokens = int(output_tokens or 0)
    return {
        "available": True,
        "gpu_count": len(by_gpu),
        "samples": len(rows),
        # the window the energy covers: first send to last end (the samples' own span when no window was given)
        "duration_s": (end_unix - start_unix) if start_unix is not None and end_unix is not None else
        (rows[-1]["t"] - rows[0]["t"] if len(rows) > 1 else 0.0),
        "sampled_s": rows[-1]["t"] - rows[0]["t"] if len(rows) > 1 else 0.0,
        "peak_memory_bytes": max(peaks) if peaks else None,
        "peak_memory_total_bytes": sum(peaks) if peaks else None,
        "mean_utilization_pct": _mean(utils),
        "mean_power_w": _mean(powers),
        "energy_j": total_energy,
        "energy_source": " + ".join(sorted(sources)) if sources else None,
        "output_tokens": tokens,
        "j_per_output_token": total_energy / tokens if total_energy is not None and tokens > 0 else None,
        "per_gpu": per_gpu,
        **failures,
    }
