"""The GPU figures of the card: from a gpu_metrics.jsonl written the way the sampler writes it (records made by
``cardgen.gpu.nvml.sample`` against a stand-in NVML with known power, memory and utilization), over the
measured window; and, without telemetry, the recorded reason and nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from simruns import synthetic_run, write_run

from cardgen.analysis import analyse, load_run
from cardgen.analysis.gpu import measured_window
from cardgen.errors import RenderError
from cardgen.gpu import GpuSampler
from cardgen.gpu import nvml as nv
from cardgen.rundir import GPU_METRICS_JSONL

SUITE = """
name: gpu
scenarios:
  - kind: closed
    prompt_tokens: [256]
    output_tokens: [32]
    parallel: [1, 4]
    min_requests: 8
"""
GIB = 2**30
POWER_W = (300.0, 200.0)  # constant, so the energy over a window is power x its length
UTIL = (60.0, 40.0)


class FakeNvml:
    """Two GPUs; ``now`` drives the energy counter and the memory used (peak at ``peak_at``)."""

    def __init__(self, t0: float, peak_at: float) -> None:
        self.t0, self.peak_at, self.now = t0, peak_at, t0

    def nvmlDeviceGetCount(self):  # pynvml's names
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700_000

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetMemoryInfo(self, h):
        used = (40 + 10 * h) * GIB - int(abs(self.now - self.peak_at) * 1e6)
        return SimpleNamespace(total=80 * GIB, used=used)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=UTIL[h], memory=20.0)

    def nvmlDeviceGetPowerUsage(self, h):
        return int(POWER_W[h] * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return int(1_000_000 + POWER_W[h] * (self.now - self.t0) * 1000)


def write_gpu_metrics(run_dir: Path, start: float, end: float, *, interval_s: float = 0.5) -> dict:
    """Sample the fake GPUs from 2 s before ``start`` to 2 s after ``end`` (the sampler runs longer than the
    load) into run_dir/gpu_metrics.jsonl; returns run.json's ``gpu`` as the sampler describes it."""
    fake = FakeNvml(start - 2.0, (start + end) / 2)
    handles = nv.handles(fake)
    lines = []
    t = start - 2.0
    while t <= end + 2.0:
        fake.now = t
        lines += [json.dumps(r) for r in nv.sample(fake, handles, t=t)]
        t += interval_s
    (run_dir / GPU_METRICS_JSONL).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return GpuSampler(run_dir / GPU_METRICS_JSONL, inventory=nv.inventory(fake)).describe()


@pytest.fixture()
def gpu_run(tmp_path) -> Path:
    data, _ = synthetic_run(suite=SUITE)
    write_run(tmp_path, data)
    start = min(r.sent_at for r in data.requests)
    end = max(r.end_at for r in data.requests)
    gpu = write_gpu_metrics(tmp_path, start, end)
    info = json.loads((tmp_path / "run.json").read_text())
    info["gpu"] = gpu
    (tmp_path / "run.json").write_text(json.dumps(info))
    return tmp_path


def test_gpu_figures_over_the_measured_window(gpu_run):
    data = load_run(gpu_run)
    assert GPU_METRICS_JSONL not in data.absent and data.gpu_metrics
    s = analyse(data).summary
    g = s.gpu_telemetry
    assert g.status == "measured" and g.reason is None
    assert (g.name, g.count, g.driver, g.source) == ("NVIDIA H100 80GB HBM3", 2, "550.54.15", "nvml")
    assert g.memory_total_bytes == 80 * GIB
    start, end = measured_window(analyse(data).requests, data.info)
    assert (g.window_start_unix, g.window_end_unix) == (start, end)
    inside = [r for r in data.gpu_metrics if start <= r["t"] <= end]
    assert g.samples == len(inside) and all(r["gpu"] in (0, 1) for r in inside)
    span = end - start  # the whole measured window: the edges beyond the first and last sample at their power
    assert g.duration_s == pytest.approx(span)
    assert max(r["t"] for r in inside) - min(r["t"] for r in inside) < span
    assert g.energy_j == pytest.approx(sum(POWER_W) * span, rel=1e-3)  # the counters, not the samples outside
    assert g.energy_source == "energy counter"
    tokens = sum(r.output_tokens for r in data.requests if r.ok)
    assert g.output_tokens == tokens
    assert g.j_per_output_token == pytest.approx(g.energy_j / tokens)
    assert g.mean_utilization_pct == pytest.approx(sum(UTIL) / 2)
    assert g.mean_power_w == pytest.approx(sum(POWER_W) / 2)
    assert g.peak_memory_bytes == max(r["mem_used_bytes"] for r in inside) <= 50 * GIB
    assert [p.gpu for p in g.per_gpu] == [0, 1]
    assert g.per_gpu[0].energy_j == pytest.approx(POWER_W[0] * span, rel=1e-3)
    assert s.gpu == "NVIDIA H100 80GB HBM3" and s.gpu_count == 2 and s.gpu_driver == "550.54.15"


def test_no_telemetry_keeps_the_recorded_reason_and_invents_nothing(tmp_path):
    data, _ = synthetic_run(suite=SUITE)
    info = data.info.model_copy(deep=True)
    info.gpu = {"telemetry": False, "reason": "no GPU telemetry: NVML library not found"}
    write_run(tmp_path, type(data)(info=info, requests=data.requests, metrics=data.metrics))
    loaded = load_run(tmp_path)
    assert GPU_METRICS_JSONL in loaded.absent
    s = analyse(loaded).summary
    g = s.gpu_telemetry
    assert g.status == "no_telemetry" and g.reason == "no GPU telemetry: NVML library not found"
    assert g.name is g.count is g.energy_j is g.j_per_output_token is g.peak_memory_bytes is None
    assert s.gpu is None and s.gpu_count is None


def test_no_telemetry_without_a_recorded_reason_says_so():
    data, _ = synthetic_run(suite=SUITE)
    g = analyse(data).summary.gpu_telemetry
    assert g.status == "no_telemetry" and "gpu_metrics.jsonl is missing or empty" in g.reason
    assert "run.json gives no reason" in g.reason


def test_samples_outside_the_window_are_no_telemetry(tmp_path):
    data, _ = synthetic_run(suite=SUITE)
    write_run(tmp_path, data)
    late = max(r.end_at for r in data.requests) + 100
    write_gpu_metrics(tmp_path, late, late + 5)
    g = analyse(load_run(tmp_path)).summary.gpu_telemetry
    assert g.status == "no_telemetry" and "no sample inside the measured window" in g.reason
    assert g.energy_j is None


def test_modelled_run_has_a_modelled_gpu():
    data, _ = synthetic_run(suite=SUITE, modelled=True)
    g = analyse(data).summary.gpu_telemetry
    assert g.status == "modelled" and g.name == "Synthetic-GPU" and "modelled" in g.reason
    assert g.energy_j is None


def test_gpu_records_round_trip_through_write_run(gpu_run, tmp_path_factory):
    data = load_run(gpu_run)
    again = load_run(write_run(tmp_path_factory.mktemp("again"), data))
    assert again.gpu_metrics == data.gpu_metrics
    assert analyse(again).summary == analyse(data).summary


def test_corrupt_gpu_metrics_is_a_render_error(gpu_run):
    lines = (gpu_run / GPU_METRICS_JSONL).read_text().splitlines()
    (gpu_run / GPU_METRICS_JSONL).write_text("\n".join([lines[0], "{torn", *lines[1:]]) + "\n")
    with pytest.raises(RenderError, match="gpu_metrics.jsonl line 2"):
        load_run(gpu_run)
    (gpu_run / GPU_METRICS_JSONL).write_text("\n".join([*lines, '{"t": 1']) + "\n")  # a torn last line is skipped
    assert len(load_run(gpu_run).gpu_metrics) == len(lines)
