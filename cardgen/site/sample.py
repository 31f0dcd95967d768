"""Sample run directories for the site's and the Hub's tests, benchmarks and previews: real renders of runs of the
virtual server in virtual time.

:func:`write_sample_run` drives a small suite (:data:`SAMPLE_SUITE`) against a virtual server with known constants
(:func:`sample_perf`: ingestion 13,500 tok/s, 42.9 tok/s per request at 10 parallel 1024 → 128 requests,
113,200 tokens of KV cache, every time divided by ``speed``) as ``cardgen build`` models a run
(:func:`cardgen.sim.modelled.modelled_run`, which writes the raw run directory), relabels it and renders it with
:func:`cardgen.card.render_run`: the card, ``summary.json``, tables and figures are exactly what ``cardgen
render`` makes. The model, GPU and engine are labels. ``modelled=False`` labels the run as
measured (a measured run is what ``cardgen push`` takes without ``--allow-modelled``); its figures are the virtual
server's all the same.

A sample is rendered once per process for each set of arguments and copied after that: the same bytes, faster.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import shutil
import tempfile
from pathlib import Path

import yaml

from cardgen.rundir import RunDir, default_run_dir
from cardgen.schemas.run import GpuDescription, ServerInfo
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.sim.modelled import modelled_run
from cardgen.sim.perf import FixedPerf
from cardgen.site.config import put_assets
from cardgen.suite import Suite, parse_suite

SAMPLE_PAIRS = ((1024, 128), (32, 16))
SAMPLE_PARALLEL = (1, 4, 10, 16)
STARTED = _dt.datetime(2026, 11, 21, 19, 57, tzinfo=_dt.UTC)


def sample_suite(*, requests: int | None = None) -> Suite:
    """An ingestion sweep, every pair of :data:`SAMPLE_PAIRS` at every count of :data:`SAMPLE_PARALLEL` with
    ``requests`` per point (at least one per user; default: one round), and Poisson arrivals at 4 req/s."""
    pairs = "\n".join(f"""  - kind: closed
    prompt_tokens: [{p}]
    output_tokens: [{o}]
    parallel: [{", ".join(str(n) for n in SAMPLE_PARALLEL)}]
    min_requests: {requests or 1}""" for p, o in SAMPLE_PAIRS)
    return parse_suite(f"""
name: sample
description: a sample of the virtual server, for the site's previews and tests
scenarios:
  - kind: ingest
    prompt_tokens: [16, 512, 1024, 2048, 4000]
{pairs}
  - kind: open
    prompt_tokens: 256
    output_tokens: 32
    rates: [4]
    num_requests: 8
""", source="cardgen.site.sample")


def sample_perf(speed: float = 1.0) -> FixedPerf:
    """The sample server: every step ``speed`` times as fast as the reference one."""
    return FixedPerf(prefill_tok_s=13_500.0 * speed, step_overhead_s=0.013_28 / speed, per_seq_s=0.000_413 / speed,
                     kv_capacity_tokens=113_200, block_size=16, max_num_seqs=256, max_num_batched_tokens=16_384)


_RENDERED: dict[tuple[object, ...], Path] = {}
_CACHE: list[Path] = []


def _cache_dir() -> Path:
    if not _CACHE:
        _CACHE.append(Path(tempfile.mkdtemp(prefix="cardgen-samples-")))
        atexit.register(shutil.rmtree, _CACHE[0], True)
    return _CACHE[0]


def _render_sample(out: Path, *, model: str, gpu: str, engine: str, modelled: bool, started: _dt.datetime,
                   speed: float, requests: int | None, render: bool) -> None:
    from cardgen.card import render_run  # noqa: PLC0415  the card and its figures load only when a sample is rendered

    config = SimConfig(model=model, gpu=gpu, perf="fixed", engine="sample")
    options = DriveOptions(start_unix=started.timestamp(), scrape_interval_s=1.0, pause_s=1.0)
    run = modelled_run(sample_suite(requests=requests), config, out, perf=sample_perf(speed), options=options,
                       argv=["cardgen", "build", model, "--suite", "sample"])
    info = run.info.model_copy(update={"server": run.info.server.model_copy(update={"engine": engine})})
    if not modelled:
        info = info.model_copy(update={
            "modelled": False, "sim": None, "clock": "real", "gpu": GpuDescription(name=gpu, count=1),
            "server": ServerInfo(url="http://127.0.0.1:8000", engine=engine, engine_version="0.0-sample",
                                 served_model=model, tokenizer="server /tokenize"),
        })
    RunDir(out).save_run_info(info)  # relabelled: the records are the modelled run's as written
    if render:
        render_run(out)


def write_sample_run(
    root: Path = Path("runs"),
    *,
    model: str = "CodeLlama-7b-Instruct-hf",
    gpu: str = "A100-80GB",
    engine: str = "vllm",
    modelled: bool = False,
    started: _dt.datetime | None = None,
    speed: float = 1.0,
    run_dir: Path | None = None,
    requests: int | None = None,
    render: bool = True,
) -> Path:
    """Write a rendered sample run under ``root`` (``<model-slug>/<stamp>/`` unless ``run_dir``); return its path.
    ``requests``: requests per closed-loop point (default: one per parallel user). ``render=False``: the raw files
    only (``run.json``, ``requests.jsonl``, ``server_metrics.jsonl``), for ``cardgen render``."""
    started = started or STARTED
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(model, root=Path(root), when=started)
    key = (model, gpu, engine, modelled, started, speed, requests, render)
    cached = _RENDERED.get(key)
    if cached is None or not cached.is_dir():
        cached = Path(tempfile.mkdtemp(dir=_cache_dir())) / "run"
        _render_sample(cached, model=model, gpu=gpu, engine=engine, modelled=modelled, started=started,
                       speed=speed, requests=requests, render=render)
        _RENDERED[key] = cached
    shutil.copytree(cached, run_dir, dirs_exist_ok=True)
    return run_dir


def isolated_config(config_file: Path, workdir: Path) -> Path:
    """A copy of ``config_file`` whose docs dir is ``workdir/site_src`` (with the committed assets copied),
    so a test or benchmark builds without touching the checkout's ``site_src/``."""
    config_file = Path(config_file).resolve()
    data = yaml.safe_load(config_file.read_text("utf-8"))
    docs = Path(workdir).resolve() / "site_src"
    docs.mkdir(parents=True, exist_ok=True)
    put_assets(config_file, docs)
    data["docs_dir"] = str(docs)
    out = Path(workdir) / "mkdocs.yml"
    out.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return out
