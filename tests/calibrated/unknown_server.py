"""A server the calibration is not told about, in virtual time: the virtual server on a GPU of its own (a --gpu
file), under an engine profile other than the fit's starting one (vLLM 0.6, prefill without chunks), its speed
constants moved by 20 to 40 %; calibrated from the vLLM V1 profile on an A100-80GB, and the same suite measured
point by point on the same server for truth (about 40 s). The tests' fixture (conftest.py) and `make bench`
(tests/bench/bench_calibrated.py) both use it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from simruns import simulate

from cardgen.analysis.analyse import Analysis, analyse
from cardgen.analysis.rundata import load_run
from cardgen.calibrated.measurer import VirtualMeasurer, measured_options
from cardgen.calibrated.steps import Start, calibrate
from cardgen.schemas.run import RunInfo
from cardgen.sim.catalog import find_model
from cardgen.sim.config import SimConfig
from cardgen.sim.hardware import find_gpu
from cardgen.sim.roofline import RooflinePerf, find_engine
from cardgen.suite import Suite, parse_suite

SUITE = """
name: calibration-test
scenarios:
  - {kind: ingest, name: ingestion, min_prompt_tokens: 16, max_prompt_tokens: 4000, points: 12, output_tokens: 1}
  - {kind: closed, name: grid, prompt_tokens: [32, 1024, 4096], output_tokens: [16, 128, 512],
     parallel: [1, 4, 16, 32], min_requests: 1, target_ci: 0.05, max_requests: 300, max_duration_s: 120}
  - {kind: open, name: serving, prompt_tokens: 1024, output_tokens: 128, rates: [4, inf], num_requests: 60}
  - {kind: batch, name: batch-table, prompt_tokens: 500, output_tokens: 200, batch_sizes: [1, 8, 32], warmups: 1,
     runs: 3}
"""
GPU_FILE = """name: unknown-gpu
memory_gb: 48
bandwidth_gb_s: 1500
peak_tflops: 260
arch: ada
"""
# the truth's constants, moved from the vllm-0.6 profile's (which the calibration does not start from either)
MOVES = {"compute_efficiency": 0.70, "bandwidth_efficiency": 0.75, "step_overhead_s": 1.35, "per_seq_overhead_s": 0.65}


@dataclass(frozen=True)
class Unknown:
    """The hidden server, its calibrated run and its point-by-point run."""

    perf: RooflinePerf
    config: SimConfig
    suite: Suite
    calibrated: Path
    info: RunInfo
    truth: Path
    _analyses: dict[str, Analysis] = field(default_factory=dict)

    def analysis(self, which: str) -> Analysis:
        """The calibrated run's analysis (``calibrated``) or the point-by-point run's, analysed once."""
        if which not in self._analyses:
            self._analyses[which] = analyse(load_run(self.calibrated if which == "calibrated" else self.truth))
        return self._analyses[which]


def hidden_server(gpu_file: Path) -> tuple[RooflinePerf, SimConfig]:
    profile = find_engine("vllm-0.6")
    profile = replace(profile, **{k: getattr(profile, k) * v for k, v in MOVES.items()})
    perf = RooflinePerf(find_model("CodeLlama-7b"), find_gpu(str(gpu_file)), profile)
    return perf, SimConfig(model="CodeLlama-7b", gpu=str(gpu_file), engine="vllm-0.6")


def run_unknown(root: Path) -> Unknown:
    """The hidden server calibrated into ``root / "calibrated"`` and measured point by point into ``root / "truth"``."""
    root.mkdir(parents=True, exist_ok=True)
    gpu_file = root / "unknown-gpu.yaml"
    gpu_file.write_text(GPU_FILE, "utf-8")
    perf, config = hidden_server(gpu_file)
    suite = parse_suite(SUITE, source="test")
    measurer = VirtualMeasurer(config, perf, suite, root / "calibrated", gpu_name="unknown-gpu")
    info = calibrate(measurer, Start(model="CodeLlama-7b", gpu="A100-80GB", profile="vllm"))
    simulate(suite, config, perf=perf, options=measured_options(start_unix=1.79e9, seed=7), run_dir=root / "truth")
    return Unknown(perf=perf, config=config, suite=suite, calibrated=root / "calibrated", info=info,
                   truth=root / "truth")
