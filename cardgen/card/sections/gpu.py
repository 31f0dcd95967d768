"""The card's GPU part: what the telemetry said over the measured window, or why there is none."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.gpu import NO_TELEMETRY
from cardgen.schemas.summary import GpuTelemetry

_GPU_SOURCES = {"nvml": "NVML (nvidia-ml-py) on the machine that ran cardgen",
                "dcgm": "the GPU host's DCGM exporter (--gpu-metrics-url)"}


def gpu_tables(g: GpuTelemetry) -> tuple[TableView | None, TableView | None]:
    """The GPU part of the parameters: what the telemetry said over the measured window (measured runs only)."""
    if g.status != "measured":
        return None, None
    count = g.count or len(g.per_gpu) or None
    peak = fmt.gib(g.peak_memory_bytes)
    if g.memory_total_bytes and g.peak_memory_bytes is not None:
        peak += f" of {fmt.gib(g.memory_total_bytes)}"
    if (count or 0) > 1 and g.peak_memory_total_bytes is not None:
        peak += f" (all GPUs together: {fmt.gib(g.peak_memory_total_bytes)})"
    energy = fmt.joules(g.energy_j) + (f" ({g.energy_source})" if g.energy_source else "")
    rows = [
        ["GPU", g.name or fmt.DASH], ["GPU count", str(count) if count else fmt.DASH],
        ["Driver", g.driver or fmt.DASH],
        ["Telemetry", _GPU_SOURCES.get(g.source or "", g.source or fmt.DASH)],
        ["Records in the measured window", f"{g.samples:,} (one per GPU per sample) over {fmt.secs(g.duration_s)}"],
        ["Failed samples and reads", _failures(g)],
        ["Peak memory used (one GPU)", peak],
        ["Mean utilization", fmt.sig(g.mean_utilization_pct) + " %" if g.mean_utilization_pct is not None
         else fmt.DASH],
        ["Mean power (per GPU)", fmt.watts(g.mean_power_w)],
        ["Energy (all GPUs)", energy],
        ["Energy per output token", f"{fmt.sig(g.j_per_output_token)} J/token over {fmt.integer(g.output_tokens)} "
                                    "output tokens" if g.j_per_output_token is not None else fmt.DASH],
        ["Tokens per joule", _per_joule(g)],
    ]
    per = None
    if len(g.per_gpu) > 1:
        per = TableView(["GPU", "Peak memory used", "Mean utilization", "Mean power", "Energy", "Samples"],
                        [[str(p.gpu), fmt.gib(p.peak_memory_bytes),
                          fmt.sig(p.mean_utilization_pct) + " %" if p.mean_utilization_pct is not None else fmt.DASH,
                          fmt.watts(p.mean_power_w), fmt.joules(p.energy_j), str(p.samples)] for p in g.per_gpu])
    return TableView(["GPU", "Value"], rows, ["l", "l"]), per


def _per_joule(g: GpuTelemetry) -> str:
    """Output tokens per joule, and prompt + output tokens per joule (the inverse of the energy per token)."""
    if g.output_tokens_per_joule is None:
        return fmt.DASH
    text = f"{fmt.sig(g.output_tokens_per_joule)} output tokens/J"
    if g.tokens_per_joule is not None:
        text += f"; {fmt.sig(g.tokens_per_joule)} prompt + output tokens/J"
    return text


def no_telemetry_reason(g: GpuTelemetry) -> str:
    """Why there is no telemetry, as recorded, without repeating "no GPU telemetry" (the card says it first)."""
    reason = (g.reason or "no reason recorded").strip()
    if reason.lower().startswith(NO_TELEMETRY.lower()):
        reason = reason[len(NO_TELEMETRY):].lstrip(" :-–") or "no reason recorded"
    return reason


def _failures(g: GpuTelemetry) -> str:
    """How many samples gave nothing and how many fields a device failed to give, inside the window."""
    if not g.failed_samples and not g.failed_reads:
        return "none"
    parts = []
    if g.failed_samples:
        parts.append(f"{fmt.integer(g.failed_samples)} samples failed (left as gaps)")
    if g.failed_reads:
        parts.append(f"{fmt.integer(g.failed_reads)} readings failed (left empty)")
    return "; ".join(parts) + (f": {', '.join(g.failure_kinds)}" if g.failure_kinds else "")
