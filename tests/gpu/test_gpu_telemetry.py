"""GPU telemetry with a stand-in NVML (fake_pynvml.py) and a fake DCGM exporter on loopback: the sampler
process, the records it writes, the reasons when there is no GPU, and the card's figures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cardgen.card.sections.gpu import gpu_tables
from cardgen.gpu import nvml as nv
from cardgen.gpu import parse_dcgm, read_gpu_metrics, start_gpu_sampler, summarize_gpu
from cardgen.rundir import GPU_METRICS_JSONL
from cardgen.schemas.summary import GpuTelemetry

HERE = Path(__file__).resolve().parent
DCGM_TEXT = (HERE.parent / "data" / "gpu" / "dcgm_exporter.txt").read_text()
GIB = 2**30


@pytest.fixture
def fake_nvml(monkeypatch):
    """The stand-in, importable by name here and in the sampler's spawned process (which inherits sys.path
    and the environment)."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("FAKE_NVML_MODE", "ok")
    import fake_pynvml

    return fake_pynvml


def wait_for_records(run_dir, n: int, *, where=lambda record: True, timeout_s: float = 30.0) -> None:
    """Until the sampler has written ``n`` records (that ``where`` accepts) to the run's gpu_metrics.jsonl."""
    deadline = time.monotonic() + timeout_s
    while sum(1 for r in read_gpu_metrics(run_dir) if where(r)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} GPU records after {timeout_s} s"
        time.sleep(0.02)


def test_inventory_and_one_sample_in_process(fake_nvml):
    inv = nv.inventory(fake_nvml)
    assert inv["name"] == "NVIDIA H100 80GB HBM3" and inv["count"] == 2
    assert inv["driver"] == "550.54.15" and inv["cuda_driver"] == "12.4"
    assert inv["memory_total_bytes"] == 80 * GIB and inv["gpus"][1]["uuid"] == "GPU-00000001"
    records = nv.sample(fake_nvml, nv.handles(fake_nvml), t=100.0)
    assert records[1] == {"t": 100.0, "gpu": 1, "source": "nvml", "util_pct": 60.0, "mem_util_pct": 20.0,
                          "mem_used_bytes": 11 * GIB, "mem_total_bytes": 80 * GIB, "power_w": 250.0,
                          "energy_mj": records[1]["energy_mj"]}


def test_sampler_process_writes_records_and_the_card_figures(fake_nvml, tmp_path):
    tmp_path = tmp_path / "run"  # not made yet: the sampler makes it
    sampler = start_gpu_sampler(tmp_path, interval_s=0.05, nvml_module="fake_pynvml")
    assert sampler.running and sampler.reason is None
    wait_for_records(tmp_path, 2 * 6)
    sampler.stop()
    assert not sampler.running
    described = sampler.describe()
    assert described["telemetry"] is True and described["count"] == 2 and described["source"] == "nvml"
    records = read_gpu_metrics(tmp_path)
    assert {r["gpu"] for r in records} == {0, 1}
    assert len(records) >= 2 * 6
    summary = summarize_gpu(records, output_tokens=1000)
    assert summary["available"] and summary["gpu_count"] == 2
    assert summary["peak_memory_bytes"] == 11 * GIB and summary["peak_memory_total_bytes"] == 21 * GIB
    assert summary["mean_utilization_pct"] == pytest.approx(55.0)
    assert summary["energy_source"] == "energy counter"
    reads = len({r["t"] for r in records})  # one sample of both GPUs per stamp; each a step of the fake's counter
    expected_j = (300.0 + 250.0) * fake_nvml.ENERGY_STEP_S * (reads - 1)  # both GPUs at constant power
    assert summary["energy_j"] == pytest.approx(expected_j)
    assert summary["j_per_output_token"] == pytest.approx(summary["energy_j"] / 1000)


def test_without_energy_counter_power_is_integrated(fake_nvml, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_MODE", "noenergy")
    with start_gpu_sampler(tmp_path, interval_s=0.05, nvml_module="fake_pynvml") as sampler:
        wait_for_records(tmp_path, 2 * 3)
    assert not sampler.running
    records = read_gpu_metrics(tmp_path)
    assert all(r["energy_mj"] is None for r in records)
    summary = summarize_gpu(records, output_tokens=10)
    assert summary["energy_source"] == "power integrated over time"
    assert summary["energy_j"] == pytest.approx(550.0 * summary["duration_s"], rel=0.1, abs=1.0)


@pytest.mark.parametrize(("mode", "reason"), [
    ("nolib", "no GPU telemetry: NVML library not found"),
    ("nodriver", "no GPU telemetry: NVIDIA driver not loaded"),
    ("nogpu", "no GPU telemetry: NVML found no GPU"),
])
def test_no_gpu_gives_a_reason_and_invents_nothing(fake_nvml, tmp_path, monkeypatch, mode, reason):
    monkeypatch.setenv("FAKE_NVML_MODE", mode)
    sampler = start_gpu_sampler(tmp_path, interval_s=0.05, nvml_module="fake_pynvml")
    assert sampler.reason == reason and sampler.inventory is None and not sampler.running
    assert sampler.describe() == {"telemetry": False, "reason": reason}
    sampler.stop()
    assert not (tmp_path / GPU_METRICS_JSONL).exists()
    assert read_gpu_metrics(tmp_path) == [] and summarize_gpu([], 100)["available"] is False


def test_missing_nvml_package_is_a_reason(tmp_path):
    sampler = start_gpu_sampler(tmp_path, nvml_module="no_such_nvml_module")
    assert sampler.reason == "no GPU telemetry: nvidia-ml-py (no_such_nvml_module) is not installed"


def test_nvml_found_absent_without_a_process_says_what_the_process_would(tmp_path, monkeypatch):
    # the parent's check (no NVML call) and the sampler process' own load give the same words; where the check
    # finds NVML absent, no process is spawned
    import cardgen.gpu.sampler as sampler_module

    for module in ("pynvml", "no_such_nvml_module"):
        absent = nv.nvml_absent(module)
        if absent is not None:
            assert absent == nv.load_nvml(module)[1]
    monkeypatch.setattr(sampler_module.nv, "nvml_absent", lambda module: "no GPU telemetry: NVML library not found")
    monkeypatch.setattr(sampler_module.mp, "get_context", lambda method: pytest.fail("a process was spawned"))
    sampler = start_gpu_sampler(tmp_path)
    assert sampler.describe() == {"telemetry": False, "reason": "no GPU telemetry: NVML library not found"}
    assert not sampler.running


def test_the_real_nvml_here_either_works_or_says_why(tmp_path):
    sampler = start_gpu_sampler(tmp_path, interval_s=0.1)
    try:
        assert sampler.inventory is not None or sampler.reason.startswith("no GPU telemetry: ")
    finally:
        sampler.stop()


def test_parse_dcgm_exporter_text():
    inventory, records = parse_dcgm(DCGM_TEXT, t=5.0)
    assert inventory["name"] == "NVIDIA A100-SXM4-80GB" and inventory["count"] == 2
    assert inventory["driver"] == "535.161.08"
    assert inventory["memory_total_bytes"] == (75000 + 5571 + 1349) * 2**20
    assert records[0] == {"t": 5.0, "gpu": 0, "source": "dcgm", "util_pct": 87.0, "mem_util_pct": 40.0,
                          "mem_used_bytes": 75000 * 2**20, "mem_total_bytes": (75000 + 5571 + 1349) * 2**20,
                          "power_w": 312.5, "energy_mj": 319159391.0}
    bare = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 40\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"} 1000\n'
    inventory, records = parse_dcgm(bare, t=1.0)  # untyped samples, no model name: nothing invented
    assert inventory["name"] is None and inventory["driver"] is None and records[0]["energy_mj"] == 1000.0


class FakeExporter:
    """A DCGM exporter on loopback whose energy counters grow by 30 J per GPU at each scrape: a count, not a
    clock, so what the records sum to does not depend on how busy the machine is."""

    def __init__(self) -> None:
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                with lock:
                    grown = exporter.scrapes * 30_000
                    exporter.scrapes += 1
                text = re.sub(r"(TOTAL_ENERGY_CONSUMPTION\{[^}]*\}) (\d+)",
                              lambda m: f"{m.group(1)} {int(m.group(2)) + grown}", DCGM_TEXT)
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_dcgm_url_is_scraped_into_the_same_records(tmp_path):
    exporter = FakeExporter()
    try:
        with start_gpu_sampler(tmp_path, interval_s=0.1, dcgm_url=exporter.url) as sampler:
            assert sampler.source == "dcgm" and sampler.inventory["url"] == exporter.url
            wait_for_records(tmp_path, 2 * 4)
    finally:
        exporter.close()
    records = read_gpu_metrics(tmp_path)
    assert {r["source"] for r in records} == {"dcgm"} and {r["gpu"] for r in records} == {0, 1}
    summary = summarize_gpu(records, output_tokens=600)
    stamps = sorted({r["t"] for r in records})  # one scrape per stamp, both GPUs in it
    per_gpu_j = 30.0 * (len(stamps) - 1)  # the counter's growth from the first record to the last
    assert summary["energy_source"] == "energy counter"
    assert summary["energy_j"] == pytest.approx(2 * per_gpu_j)
    assert summary["peak_memory_bytes"] == 75000 * 2**20


def test_an_unreachable_dcgm_exporter_is_a_reason(tmp_path):
    from cardgen.engines.launch import free_port

    sampler = start_gpu_sampler(tmp_path, dcgm_url=f"http://127.0.0.1:{free_port()}/metrics")
    assert sampler.reason.startswith("no GPU telemetry: DCGM exporter at http://127.0.0.1:")
    assert "did not answer" in sampler.reason


def test_summary_windows_and_edge_cases():
    rows = [{"t": t, "gpu": 0, "util_pct": u, "mem_used_bytes": m, "power_w": 100.0, "energy_mj": e}
            for t, u, m, e in [(0, 10, 1, 0), (1, 20, 5, 100_000), (2, 30, 3, 200_000), (3, 90, 9, 300_000)]]
    whole = summarize_gpu(rows, output_tokens=0)
    assert whole["energy_j"] == 300.0 and whole["j_per_output_token"] is None and whole["peak_memory_bytes"] == 9
    window = summarize_gpu(rows, output_tokens=50, start_unix=0.5, end_unix=2.5)
    # the counter over 1..2 s, and the window's edges (0.5 s each) at the nearest samples' 100 W
    assert window["energy_j"] == 200.0 and window["j_per_output_token"] == 4.0
    assert window["mean_utilization_pct"] == 25.0 and window["peak_memory_bytes"] == 5
    one = summarize_gpu(rows[:1], output_tokens=5)
    assert one["energy_j"] is None and one["j_per_output_token"] is None


def test_reading_a_torn_last_line(tmp_path):
    path = tmp_path / GPU_METRICS_JSONL
    path.write_text(json.dumps({"t": 1, "gpu": 0}) + "\n" + '{"t": 2, "gp')
    assert read_gpu_metrics(tmp_path) == [{"t": 1, "gpu": 0}]


def test_the_gpu_package_imports_neither_locust_nor_gevent():
    code = "import sys, cardgen.gpu; bad = {'locust', 'gevent'} & set(sys.modules); sys.exit(sorted(bad) or 0)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_sampler_runs_beside_a_gevent_monkey_patched_load_generator(tmp_path):
    """cardgen build imports the load engine (which monkey-patches for gevent) before it starts the sampler."""
    code = f"""
from gevent import monkey
monkey.patch_all()
import os, sys, gevent
sys.path.insert(0, {str(HERE)!r})
os.environ["FAKE_NVML_MODE"] = "ok"
from cardgen.gpu import read_gpu_metrics, start_gpu_sampler
sampler = start_gpu_sampler({str(tmp_path)!r}, interval_s=0.05, nvml_module="fake_pynvml")
ticks = []
loop = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.01)) for _ in range(20)])
while len(read_gpu_metrics({str(tmp_path)!r})) < 4:  # the sampler writes beside the gevent loop
    gevent.sleep(0.01)
sampler.stop()
loop.join()
assert sampler.describe()["count"] == 2 and not sampler.running and len(ticks) == 20
print(len(read_gpu_metrics({str(tmp_path)!r})))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) >= 4


def test_nvml_errors_other_than_not_supported_are_recorded_and_counted(fake_nvml, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_MODE", "flaky")
    records = nv.sample(fake_nvml, nv.handles(fake_nvml), t=1.0)
    assert "errors" not in records[0] and records[0]["power_w"] == 300.0
    assert records[1]["power_w"] is None and records[1]["errors"] == {"power_w": "NVML error: Unknown Error"}
    summary = summarize_gpu(records, output_tokens=10)
    assert (summary["failed_samples"], summary["failed_reads"], summary["failure_kinds"]) == (
        0, 1, ["NVML error"])
    monkeypatch.setenv("FAKE_NVML_MODE", "noenergy")  # not supported: no figure, no error
    assert all("errors" not in r and r["energy_mj"] is None for r in nv.sample(fake_nvml, nv.handles(fake_nvml)))

    def broken(h):
        raise fake_nvml.NVMLError("GPU is lost")

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetUUID", broken)
    with pytest.raises(fake_nvml.NVMLError):  # the sampler reports it as the reason there is no telemetry
        nv.inventory(fake_nvml)


def test_failed_dcgm_scrapes_are_on_disk_and_counted(tmp_path):
    exporter = FakeExporter()
    try:
        with start_gpu_sampler(tmp_path, interval_s=0.1, dcgm_url=exporter.url):
            wait_for_records(tmp_path, 2)
            exporter.close()  # the exporter goes away mid-run
            wait_for_records(tmp_path, 1, where=lambda r: r.get("failed"))
    finally:
        exporter.close()
    records = read_gpu_metrics(tmp_path)
    failed = [r for r in records if r.get("failed")]
    assert failed and all(r["source"] == "dcgm" and "gpu" not in r for r in failed)
    summary = summarize_gpu(records, output_tokens=100)
    assert summary["failed_samples"] == len(failed) and summary["failure_kinds"] == ["ConnectionError"]
    assert summary["samples"] == len(records) - len(failed)  # a failed scrape is not a sample of a GPU


def test_the_card_shows_failed_samples_and_reads():
    ok, _ = gpu_tables(GpuTelemetry(status="measured", samples=10))
    assert ["Failed samples and reads", "none"] in ok.rows
    bad, _ = gpu_tables(GpuTelemetry(status="measured", samples=10, failed_samples=3, failed_reads=2,
                                     failure_kinds=["ConnectionError", "NVML error"]))
    assert ["Failed samples and reads", "3 samples failed (left as gaps); 2 readings failed (left empty): "
            "ConnectionError, NVML error"] in bad.rows
