"""GPUs: the presets (MI300X and B200 among them), a GPU of one's own from a YAML file, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cardgen.errors import UsageError
from cardgen.sim.hardware import GIB, find_gpu, list_gpus, load_gpu_file
from cardgen.sim.perf import SeqWork
from cardgen.sim.roofline import build_perf_model

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

MY_GPU = "name: my-gpu\nmemory_gb: 96\nbandwidth_gb_s: 4000\npeak_tflops: 900\n"


def test_new_presets_carry_their_datasheets() -> None:
    mi, b = find_gpu("mi300x"), find_gpu("B200-SXM")
    assert (mi.name, mi.peak_flops, mi.bandwidth_bytes_s, mi.memory_gb) == ("MI300X", 1307.4e12, 5.3e12, 192)
    assert (b.name, b.peak_flops, b.bandwidth_bytes_s, b.memory_gb) == ("B200", 2250e12, 7.7e12, 180)
    assert b.memory_bytes < 180 * GIB and mi.memory_bytes < 192 * GIB  # what the driver reports
    assert find_gpu("H100-NVL").memory_gb == 94 and find_gpu("h100nvl").bandwidth_bytes_s == 3.9e12


def test_a_70b_model_fits_one_large_gpu_and_runs_faster_on_more_bandwidth() -> None:
    # 141 GB of weights: not on one H200 (141 GB), on one B200 (180) or MI300X (192)
    with pytest.raises(UsageError, match="does not fit"):
        build_perf_model(model="Llama-3.1-70B", model_config=None, gpu="H200", engine="vllm")
    b200 = build_perf_model(model="Llama-3.1-70B", model_config=None, gpu="B200", engine="vllm")
    mi = build_perf_model(model="Llama-3.1-70B", model_config=None, gpu="MI300X", engine="vllm")
    assert mi.kv_capacity_tokens > b200.kv_capacity_tokens > 0
    dec = [SeqWork(1, 1000)] * 8
    assert b200.step_time_s([], dec) < mi.step_time_s([], dec)  # 7.7 TB/s against 5.3


def test_unknown_gpu_is_one_line_listing_the_known_ones() -> None:
    with pytest.raises(UsageError) as err:
        find_gpu("TPU-v5")
    msg = err.value.message
    assert "\n" not in msg and all(n in msg for n in list_gpus()) and ".yaml" in msg


def test_gpu_file(tmp_path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(MY_GPU)
    g = find_gpu(str(path))
    assert (g.name, g.memory_bytes, g.bandwidth_bytes_s, g.peak_flops) == ("my-gpu", 96e9, 4e12, 900e12)
    assert "PCIe" in g.link_name  # no link given: the slowest preset link, said to be assumed
    p = build_perf_model(model="CodeLlama-7b", model_config=None, gpu=str(path), engine="vllm-0.4")
    a100 = build_perf_model(model="CodeLlama-7b", model_config=None, gpu="A100-80GB", engine="vllm-0.4")
    assert p.kv_capacity_tokens > a100.kv_capacity_tokens  # 96 GB against 80
    (tmp_path / "named.yml").write_text("memory_gb: 24\nbandwidth_gb_s: 300\npeak_tflops: 121\nmemory_gib: 22\n")
    g = load_gpu_file(tmp_path / "named.yml")
    assert g.name == "named" and g.memory_bytes == 22 * GIB


@pytest.mark.parametrize("text,words", [
    ("memory_gb: 96\nbandwidth_gb_s: 4000\n", ["missing peak_tflops"]),
    (MY_GPU + "bandwith: 3\n", ["unknown key(s) bandwith"]),
    ("memory_gb: -1\nbandwidth_gb_s: 4000\npeak_tflops: 900\n", ["memory_gb must be a positive number"]),
    ("memory_gb: 96\nbandwidth_gb_s: fast\npeak_tflops: 900\n", ["bandwidth_gb_s must be a positive number"]),
    (MY_GPU + "link: {name: x}\n", ["link must have exactly"]),
    ("[1, 2]\n", ["must be a mapping"]),
    ("memory_gb: [\n", ["not valid YAML"]),
])
def test_bad_gpu_files_are_one_line_errors(tmp_path, text: str, words: list[str]) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        find_gpu(str(path))
    msg = err.value.message
    assert "\n" not in msg and all(w in msg for w in words), msg
    with pytest.raises(UsageError, match="does not exist"):
        find_gpu(str(tmp_path / "none.yaml"))


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cardgen", "plan", "CodeLlama-7b", "--suite", "quick", *args],
                          capture_output=True, text=True, timeout=300)


def test_plan_takes_a_gpu_file_and_rejects_an_unknown_gpu(tmp_path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(MY_GPU)
    ok = _plan("--gpu", str(path), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gpu_time_s"] > 0
    bad = _plan("--gpu", "TPU-v5")
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "MI300X" in bad.stderr
