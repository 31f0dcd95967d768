"""GPU telemetry: an NVML sampler in its own process, a DCGM-exporter scraper for a remote GPU, and the
card's GPU figures (peak memory, mean utilization, energy per output token).

- :func:`start_gpu_sampler` -> :class:`GpuSampler` (``.stop()``, ``.inventory``, ``.reason``, ``.describe()``)
- :func:`summarize_gpu` (pure), :func:`read_gpu_metrics`
- :func:`parse_dcgm` (pure): one DCGM exporter scrape as inventory + records

Records in ``gpu_metrics.jsonl``, one per GPU per sample: ``t`` (Unix s), ``gpu`` (index), ``source``
(nvml | dcgm), ``util_pct``, ``mem_util_pct``, ``mem_used_bytes``, ``mem_total_bytes``, ``power_w``,
``energy_mj`` (the device's total-energy counter); None where the device does not say.
"""

from cardgen.gpu.dcgm import parse_dcgm
from cardgen.gpu.sampler import NO_TELEMETRY, GpuSampler, start_gpu_sampler
from cardgen.gpu.summary import read_gpu_metrics, summarize_gpu

__all__ = ["NO_TELEMETRY", "GpuSampler", "parse_dcgm", "read_gpu_metrics", "start_gpu_sampler", "summarize_gpu"]
