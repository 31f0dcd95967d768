"""The card's "Server vs client" section and the GPU part of its Parameters: shown with their method when the
run has the data, saying what is missing (and why, as recorded) when it has not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from simruns import SyntheticServer, synthetic_run, write_run

from cardgen import numbers as fmt
from cardgen.analysis import RunData, analyse
from cardgen.card import render_card, render_run
from cardgen.rundir import CARD_MD, GPU_METRICS_JSONL, RUN_JSON, SUMMARY_JSON

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = """
name: sections
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 1024]
  - kind: closed
    prompt_tokens: [256]
    output_tokens: [32]
    parallel: [1, 4]
    min_requests: 8
"""
GIB = 2**30


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end >= 0 else None]


def gpu_part(text: str) -> str:
    part = section(text, "## Parameters")
    return part[part.index("### GPU"):]


def write_gpu_run(run_dir: Path, *, name: str = "NVIDIA H100 80GB HBM3") -> None:
    """A run directory with a gpu_metrics.jsonl as the NVML sampler writes it (two GPUs, 300 W and 200 W, one
    record per GPU every 0.5 s from 1 s before the first request to 1 s after the last)."""
    data, _ = synthetic_run(suite=SUITE)
    info = data.info.model_copy(deep=True)
    info.gpu = {"telemetry": True, "source": "nvml", "name": name, "count": 2, "driver": "550.54.15",
                "cuda_driver": "12.4", "memory_total_bytes": 80 * GIB, "gpus": []}
    write_run(run_dir, RunData(info=info, requests=data.requests, metrics=data.metrics))
    start = min(r.sent_at for r in data.requests) - 1
    end = max(r.end_at for r in data.requests) + 1
    lines, t = [], start
    while t <= end:
        for gpu, watts in enumerate((300.0, 200.0)):
            lines.append(json.dumps({"t": t, "gpu": gpu, "source": "nvml", "util_pct": 50.0 + 20 * gpu,
                                     "mem_util_pct": 10.0, "mem_used_bytes": (30 + gpu) * GIB,
                                     "mem_total_bytes": 80 * GIB, "power_w": watts,
                                     "energy_mj": 5e6 + watts * (t - start) * 1000}))
        t += 0.5
    (run_dir / GPU_METRICS_JSONL).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_gpu_part_shows_the_telemetry_and_its_method(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790035200")
    write_gpu_run(tmp_path)
    text = render_run(tmp_path).read_text("utf-8")
    g = json.loads((tmp_path / SUMMARY_JSON).read_text())["gpu_telemetry"]
    assert g["status"] == "measured" and g["j_per_output_token"] > 0
    part = gpu_part(text)
    for row in ("| GPU | NVIDIA H100 80GB HBM3 |", "| GPU count | 2 |", "| Driver | 550.54.15 |",
                "| Peak memory used (one GPU) | 31.0 GiB of 80.0 GiB (all GPUs together: 61.0 GiB) |",
                "| Mean utilization | 60.0 % |", "| Mean power (per GPU) | 250 W |",
                f"| Energy per output token | {fmt.sig(g['j_per_output_token'])} J/token over "
                f"{g['output_tokens']:,} output tokens |"):
        assert row in part, row
    assert "(energy counter)" in part and "NVML" in part
    assert "| GPU | Peak memory used | Mean utilization |" in part  # one row per GPU
    assert "Over the measured window (first request sent to last request ended)" in part
    assert "No GPU telemetry" not in text
    before = (tmp_path / CARD_MD).read_bytes()
    render_run(tmp_path)
    assert (tmp_path / CARD_MD).read_bytes() == before  # still deterministic
    ModelCard(text)


def test_gpu_name_from_telemetry_stays_text(tmp_path):
    write_gpu_run(tmp_path, name="<script>alert(1)</script> | x")
    text = render_run(tmp_path).read_text("utf-8")
    assert "<script" not in text and "| GPU | &lt;script&gt;alert(1)&lt;/script&gt; \\| x |" in gpu_part(text)


def test_no_telemetry_gives_the_recorded_reason(tmp_path):
    data, _ = synthetic_run(suite=SUITE)
    info = data.info.model_copy(deep=True)
    info.gpu = {"telemetry": False, "reason": "no GPU telemetry: NVML library not found"}
    text = render_card(analyse(RunData(info=info, requests=data.requests, metrics=data.metrics)), date="2026-01-01")
    part = gpu_part(text)
    assert "No GPU telemetry: NVML library not found." in part
    assert "J/token" not in text and "GiB" not in text
    assert "| GPU | — |" in section(text, "## Parameters")  # nothing invented


def test_no_telemetry_and_no_reason(tmp_path):
    text = render_card(analyse(synthetic_run(suite=SUITE)[0]), date="2026-01-01")
    assert ("No GPU telemetry: gpu\\_metrics.jsonl is missing or empty, and run.json gives no reason."
            in gpu_part(text))


def test_modelled_gpu_is_said_to_be_modelled():
    text = render_card(analyse(synthetic_run(suite=SUITE, modelled=True)[0]), date="2026-01-01")
    part = gpu_part(text)
    assert "The GPU (Synthetic-GPU) is modelled by cardgen's virtual GPU server: there is no GPU" in part
    assert "J/token" not in text


def test_server_vs_client_section():
    text = render_card(analyse(synthetic_run(suite=SUITE)[0]), date="2026-01-01")
    assert text.index("## Batch table") < text.index("## Server vs client") < text.index("## Parameters")
    part = section(text, "## Server vs client")
    assert "the increase of its latency histograms and token" in part and "Client − server is what the" in part
    assert re.search(r"\| TTFT \| mean \| [\d.,]+ ms \| [\d.,]+ ms \| \+2\.\d\d ms \|", part)
    assert re.search(r"\| TTFT \| count \(requests\) \| 19 \| 19 \| 0 \|", part)
    assert re.search(r"\| ITL \| mean \| [\d.,]+ ms \| [\d.,]+ ms \| 0 ms \|", part)
    assert "(bucket " in part and "inside the bucket" in part
    assert "| Queue time (server only) | mean | — |" in part
    assert "Server histograms: vllm:time\\_to\\_first\\_token\\_seconds, vllm:inter\\_token\\_latency\\_seconds" in part
    assert "| output tokens | 515 | 515 | 0 | vllm:generation\\_tokens\\_total |" in part
    assert "| closed-in256-out32-p4 | 8 / 8 |" in part


def test_server_vs_client_without_histograms_or_metrics():
    data, _ = synthetic_run(suite=SUITE, server=SyntheticServer(expose_histograms=False))
    part = section(render_card(analyse(data), date="2026-01-01"), "## Server vs client")
    assert "The server publishes no latency histogram" in part and "| output tokens |" in part
    assert "| TTFT |" not in part
    bare = RunData(info=data.info, requests=data.requests, metrics=[])
    part = section(render_card(analyse(bare), date="2026-01-01"), "## Server vs client")
    assert "Not available: server\\_metrics.jsonl is missing or holds no successful scrape." in part
    tgi, _ = synthetic_run(suite=SUITE, server=SyntheticServer(engine="tgi"))
    part = section(render_card(analyse(tgi), date="2026-01-01"), "## Server vs client")
    assert "Not available: the server's /metrics has no latency histogram" in part


def test_render_without_telemetry_files(tmp_path):
    data, _ = synthetic_run(suite=SUITE)
    write_run(tmp_path, data)
    (tmp_path / "server_metrics.jsonl").unlink()
    text = render_run(tmp_path).read_text("utf-8")
    assert "Not available: server\\_metrics.jsonl is missing" in text and "No GPU telemetry" in text
    summary = json.loads((tmp_path / SUMMARY_JSON).read_text())
    assert summary["server_vs_client"]["available"] is False
    assert summary["gpu_telemetry"]["status"] == "no_telemetry"
    assert json.loads((tmp_path / RUN_JSON).read_text())["gpu"]["name"] == "Synthetic-GPU"


@pytest.mark.parametrize("value", [1e-7, -1e-7])
def test_sub_microsecond_differences_are_zero(value):
    assert fmt.signed_ms(value) == "0 ms"
    assert fmt.signed_ms(0.0021) == "+2.10 ms" and fmt.signed_ms(-0.0586) == "−58.6 ms"
