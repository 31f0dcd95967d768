"""Runs with known truth for the analysis, figures, card and site tests: ``cardgen build``'s own modelled run
(:func:`cardgen.sim.modelled.modelled_run`, through :func:`simulate`) against a virtual server with exactly
known constants (:class:`FixedPerf`), its records and scrapes made to look like a *measured* run of another
engine when a test needs one.

The truth is the performance model's: prefill rate, step times, KV capacity (:class:`SyntheticServer` holds
them and builds the FixedPerf), and the server's own time of every token (:class:`SyntheticTruth`).

Other engines are a test double: the virtual server exposes vLLM's metric names; ``engine`` rewrites each
scrape into what that engine would expose instead (older vLLM names, TGI's or llama.cpp's gauges, or no
/metrics at all) and ``expose_*`` hide parts of it, so the analysis' engine adapters are tested on the same
known run. ``fail_every`` is the virtual server's own ``http500`` fault.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cardgen.analysis.rundata import RunData
from cardgen.rundir import GPU_METRICS_JSONL
from cardgen.runwriter import RunWriter
from cardgen.schemas import MetricSample, RunInfo, ServerInfo
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import T0, DriveOptions
from cardgen.sim.faults import FaultPlan
from cardgen.sim.modelled import ModelledRun, modelled_run
from cardgen.sim.perf import FixedPerf, PerfModel
from cardgen.suite import Suite, parse_suite

ENGINES = ("vllm", "vllm-old", "tgi", "llamacpp", "none")
#: where a run kept only in memory is written: a RAM file system where there is one (its fsyncs cost nothing)
MEMORY = "/dev/shm" if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else None

SMALL_SUITE = """
name: synthetic-small
description: a small suite covering every scenario kind, for tests
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 768, 1024, 1536, 2048, 3072, 4000]
    repeats: 2
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1, 4, 10]
    min_requests: 20
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [32]
    parallel: [1, 4, 10]
    min_requests: 12
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 128
    max_wave: 12
  - kind: open
    prompt_tokens: 256
    output_tokens: 32
    rates: [2, 8, inf]
    num_requests: 16
  - kind: batch
    prompt_tokens: 128
    output_tokens: 16
    batch_sizes: [1, 2, 4, 8]
    warmups: 1
    runs: 3
"""


def simulate(suite: Suite, config: SimConfig, *, run_dir: Path | None = None, perf: PerfModel | None = None,
             options: DriveOptions | None = None, argv: Sequence[str] | None = None,
             run_saturated: bool = False) -> ModelledRun:
    """``suite`` on the virtual server ``config`` describes, as ``cardgen build`` with no server makes the run
    (:func:`~cardgen.sim.modelled.modelled_run`, written as its points end), into ``run_dir``; without one, into a
    temporary directory removed after: the run is then the returned info and driver's account. ``argv``: the
    command run.json says (default: ``cardgen build MODEL --gpu GPU --tp N --suite NAME``)."""
    argv = list(argv) if argv is not None else [
        "cardgen", "build", config.model, "--gpu", config.gpu, "--tp", str(config.tp), "--suite", suite.name]
    if run_dir is not None:
        return modelled_run(suite, config, run_dir, argv=argv, perf=perf, options=options, run_saturated=run_saturated)
    with tempfile.TemporaryDirectory(prefix="cardgen-simulated-", dir=MEMORY) as tmp:
        return modelled_run(suite, config, Path(tmp) / "run", argv=argv, perf=perf, options=options,
                            run_saturated=run_saturated)


@dataclass(frozen=True, kw_only=True)
class SyntheticServer:
    """The known constants of the virtual server (a :class:`FixedPerf`), and what it shows of itself."""

    prefill_tok_s: float = 8000.0
    step_overhead_s: float = 0.008
    per_seq_s: float = 0.0004
    kv_capacity_tokens: int = 12288
    block_size: int = 16
    max_num_seqs: int = 64
    max_batched_tokens: int = 8192
    network_s: float = 0.001  # each way
    jitter: float = 0.02  # relative standard deviation of a step's duration
    fail_every: int = 0  # every n-th request is answered with HTTP 500 (0: none)
    engine: str = "vllm"  # whose /metrics the run shows: see ENGINES
    expose_cache_config: bool = True
    expose_usage: bool = True
    expose_histograms: bool = True  # vLLM's latency histograms (vllm engines only)
    scrape_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}")
        if self.kv_capacity_tokens % self.block_size:
            raise ValueError("kv_capacity_tokens must be a multiple of block_size")

    def perf(self) -> FixedPerf:
        return FixedPerf(prefill_tok_s=self.prefill_tok_s, step_overhead_s=self.step_overhead_s,
                         per_seq_s=self.per_seq_s, kv_capacity_tokens=self.kv_capacity_tokens,
                         block_size=self.block_size, max_num_seqs=self.max_num_seqs,
                         max_num_batched_tokens=self.max_batched_tokens)


@dataclass(frozen=True)
class ServerStamp:
    """When the server received a request and emitted each of its tokens."""

    scenario: str
    arrive: float
    emits: tuple[float, ...]

    @property
    def speed_from_start_tok_s(self) -> float:
        return len(self.emits) / (self.emits[-1] - self.arrive)

    @property
    def decode_tok_s(self) -> float:
        return (len(self.emits) - 1) / (self.emits[-1] - self.emits[0]) if len(self.emits) > 1 else math.nan


@dataclass(frozen=True)
class SyntheticTruth:
    server: SyntheticServer
    stamps: tuple[ServerStamp, ...]
    preemptions: int

    def median(self, scenario: str, metric: str) -> float:
        """Median over the scenario's successful requests of a :class:`ServerStamp` property."""
        return float(np.median([getattr(s, metric) for s in self.stamps if s.scenario == scenario]))


def synthetic_run(*, suite: Suite | str = SMALL_SUITE, server: SyntheticServer | None = None,
                  model: str = "synthetic/Llama-tiny", seed: int = 0, modelled: bool = False,
                  ) -> tuple[RunData, SyntheticTruth]:
    """``suite`` (a :class:`Suite` or its YAML) driven against ``server`` in virtual time: the run's data and
    the truth behind it. ``modelled=False`` makes it look measured (a vLLM server at 127.0.0.1:8000)."""
    server = server or SyntheticServer()
    suite = parse_suite(suite, source="synthetic suite") if isinstance(suite, str) else suite
    config = SimConfig(
        model=model, gpu="Synthetic-GPU", engine="synthetic", perf="fixed", cache_config=server.expose_cache_config,
        faults=FaultPlan(every={"http500": server.fail_every}) if server.fail_every else FaultPlan())
    options = DriveOptions(start_unix=T0, seed=seed, network_s=server.network_s, read_jitter_s=0.0002,
                           step_jitter=server.jitter, scrape_interval_s=server.scrape_interval_s)
    run = simulate(suite, config, perf=server.perf(), options=options)
    info = run.info if modelled else _measured(run.info, server, model)
    metrics = [_as_engine(s, server) for s in run.drive.scrapes] if server.engine != "none" else []
    stamps = tuple(ServerStamp(d.record.scenario, d.served.sent, d.served.times) for d in run.drive.requests
                   if d.served is not None and not d.record.warmup)
    truth = SyntheticTruth(server=server, stamps=stamps, preemptions=run.drive.preemptions)
    return RunData(info=info, requests=run.drive.records, metrics=metrics), truth


def write_run(run_dir: Path, data: RunData) -> Path:
    """Write ``data`` as a raw run directory, as the load stage does (and ``gpu_metrics.jsonl`` when it has
    GPU records, as the sampler does)."""
    path = RunWriter.write_whole(run_dir, data.info, data.requests, data.metrics)
    if data.gpu_metrics:
        with (path / GPU_METRICS_JSONL).open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(record) + "\n" for record in data.gpu_metrics)
    return path


def _measured(info: RunInfo, server: SyntheticServer, model: str) -> RunInfo:
    """run.json as a load stage measuring a real server of ``server.engine`` would write it."""
    engine = {"vllm-old": "vllm", "none": "openai-compatible"}.get(server.engine, server.engine)
    extra: dict[str, Any] = {}
    if server.engine == "llamacpp" and server.expose_cache_config:
        extra["props"] = {"total_slots": server.max_num_seqs, "model_path": model,
                          "default_generation_settings": {"n_ctx": server.kv_capacity_tokens // server.max_num_seqs}}
        # what llama-server's log says of its slots (no endpoint says whether they share one cache)
        extra["log"] = {"n_slots": server.max_num_seqs, "n_ctx_slot": server.kv_capacity_tokens // server.max_num_seqs,
                        "kv_unified": False}
    return RunInfo.model_validate({**info.model_dump(by_alias=True),
        "command": ["cardgen", "build", model, "--url", "http://127.0.0.1:8000"],
        "server": ServerInfo(url="http://127.0.0.1:8000", engine=engine, engine_version="synthetic",
                             served_model=model, extra=extra, tokenizer="server /tokenize",
                             launch={"args": ["--block-size", str(server.block_size),
                                              "--max-num-seqs", str(server.max_num_seqs)]}),
        "modelled": False, "sim": None, "clock": "real", "gpu": {"name": "Synthetic-GPU", "count": 1, "driver": "none"},
    })


_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
               "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
               "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")


def _as_engine(scrape: MetricSample, server: SyntheticServer) -> MetricSample:
    """One scrape of the virtual server as ``server.engine`` would have exposed it."""
    s = scrape.samples

    def one(value: float | None) -> list[dict[str, Any]]:
        return [{"labels": {}, "value": float(value or 0.0)}]

    if server.engine == "tgi":
        out = {"tgi_batch_current_size": one(scrape.value("vllm:num_requests_running")),
               "tgi_queue_size": one(scrape.value("vllm:num_requests_waiting"))}
        if server.expose_cache_config:
            out["tgi_batch_max_total_tokens"] = one(server.kv_capacity_tokens)
        return scrape.model_copy(update={"samples": out})
    if server.engine == "llamacpp":
        return scrape.model_copy(update={"samples": {
            "llamacpp:requests_processing": one(scrape.value("vllm:num_requests_running")),
            "llamacpp:requests_deferred": one(scrape.value("vllm:num_requests_waiting")),
            "llamacpp:prompt_tokens_total": one(scrape.value("vllm:prompt_tokens_total")),
        }})
    out = {}
    for name, samples in s.items():
        base = name.rsplit("_", 1)[0] if name.endswith(("_bucket", "_count", "_sum")) else name
        if name.startswith("cardgen_sim_"):
            continue
        if base in _HISTOGRAMS and not server.expose_histograms:
            continue
        if name == "vllm:kv_cache_usage_perc" and not server.expose_usage:
            continue
        if server.engine == "vllm-old":
            if name == "vllm:kv_cache_usage_perc":
                name = "vllm:gpu_cache_usage_perc"
            elif base == "vllm:inter_token_latency_seconds":
                name = name.replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
            elif name == "vllm:cache_config_info":
                samples = [{**x, "labels": {k: v for k, v in x["labels"].items() if k != "kv_cache_size_tokens"}}
                           for x in samples]
        out[name] = samples
    return scrape.model_copy(update={"samples": out})
