# ruff: noqa: I001  (locust must be imported first: it monkey-patches the standard library)
"""Measure a server: the load stage of ``cardgen build``.

Import this module first in a load-generating process: it imports Locust, which monkey-patches the
standard library for gevent, and that must happen before ``requests``/``ssl`` are imported elsewhere.
"""

from __future__ import annotations

import locust  # noqa: F401  (monkey-patches for gevent: keep first)

import datetime as dt
import logging
import random
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import requests

from cardgen import __version__
from cardgen.engines.detect import probe
from cardgen.errors import RunError, ServerError, UsageError
from cardgen.points import Point, expand, fit_context
from cardgen.load.progress import PointProgress
from cardgen.load.recorder import Recorder
from cardgen.load.runner import RunPlan, run_plan
from cardgen.load.scraper import Scraper
from cardgen.load.sizing import PromptBook
from cardgen.rundir import REQUESTS_JSONL, SERVER_METRICS_JSONL
from cardgen.runinfo import RunInfo, ServerInfo, redact_argv, save_run_info
from cardgen.suite import Suite

log = logging.getLogger("cardgen.load")

LOOP_LAG_WARN_S = 0.010
SEND_LAG_WARN_S = 0.010
CPU_WARN_PERCENT = 90.0


@dataclass
class LoadConfig:
    url: str
    model: str
    suite: Suite
    run_dir: Path
    api_key: str | None = None
    workers: int = 0
    remote_workers: bool = False
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    scrape_interval_s: float = 0.5
    quiet: bool = False
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    engine: str | None = None  # force the engine instead of detecting it
    modelled: bool = False
    sim: dict[str, Any] | None = None
    gpu: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, Any] | None = None
    gpu_metrics_url: str | None = None  # a DCGM exporter's /metrics for a GPU on another host


@dataclass
class LoadResult:
    run_dir: Path
    info: RunInfo


def check_url(url: str) -> str:
    """The base URL without a trailing slash or ``/v1``; a one-line UsageError when it is not an http(s) URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError(f"'{url}' is not a server URL: give one like http://127.0.0.1:8000")
    try:
        _ = parsed.port
    except ValueError:
        raise UsageError(f"'{url}' has an invalid port") from None
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _loadgen_report(recorder: Recorder) -> tuple[dict[str, Any], list[str]]:
    """Percentiles of event-loop lag, send lag and CPU, and warnings when the client was the bottleneck."""
    lags, cpus, send_lags = recorder.loop_lags_s, recorder.cpu_percents, recorder.send_lags_s
    report = {
        "loop_lag_p50_s": _pct(lags, 50), "loop_lag_p95_s": _pct(lags, 95), "loop_lag_p99_s": _pct(lags, 99),
        "loop_lag_max_s": max(lags, default=None),
        "send_lag_p50_s": _pct(send_lags, 50), "send_lag_p99_s": _pct(send_lags, 99),
        "cpu_percent_p50": _pct(cpus, 50), "cpu_percent_max": max(cpus, default=None),
        "samples": len(lags),
    }
    warnings = []
    if report["loop_lag_p95_s"] is not None and report["loop_lag_p95_s"] > LOOP_LAG_WARN_S:
        warnings.append(f"the load generator's event loop stalled over {report['loop_lag_p95_s'] * 1000:.0f} ms in "
                        "more than 1 second in 20: client-side timings may be late; use --workers N to spread "
                        "the load")
    if report["send_lag_p99_s"] is not None and report["send_lag_p99_s"] > SEND_LAG_WARN_S:
        warnings.append(f"open-loop requests left {report['send_lag_p99_s'] * 1000:.0f} ms (p99) after their "
                        "scheduled time: the client, not the server, limited the arrival rate")
    if report["cpu_percent_max"] is not None and report["cpu_percent_max"] > CPU_WARN_PERCENT:
        warnings.append(f"a load-generator process used {report['cpu_percent_max']:.0f} % of a core: the client may "
                        "be the bottleneck; use --workers N")
    return report, warnings


def _max_model_len(server: ServerInfo) -> int | None:
    """The served model's context length as ``/v1/models`` gives it (vLLM, SGLang, the virtual server)."""
    if isinstance(server.models, dict):
        for entry in server.models.get("data") or ():
            if isinstance(entry, dict) and entry.get("id") == server.served_model:
                value = entry.get("max_model_len")
                return value if isinstance(value, int) and value > 0 else None
    return None


def _is_local(base: str) -> bool:
    host = (urlparse(base).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


@contextmanager
def _gpu_telemetry(cfg: LoadConfig, base: str, run_dir: Path) -> Iterator[dict[str, Any]]:
    """Sample the server's GPUs while the load runs: NVML when the server is on this machine, the DCGM
    exporter at --gpu-metrics-url otherwise. Yields what run.json's ``gpu`` holds. Nothing for a modelled
    run: its GPU is modelled, not there."""
    if cfg.modelled:
        yield dict(cfg.gpu)
        return
    if cfg.gpu_metrics_url is None and not _is_local(base):
        yield {"telemetry": False, "reason": "no GPU telemetry: the server is on another host; give "
                                             "--gpu-metrics-url with its DCGM exporter's /metrics"}
        return
    from cardgen.gpu import start_gpu_sampler

    sampler = start_gpu_sampler(run_dir, dcgm_url=cfg.gpu_metrics_url)
    try:
        yield {**cfg.gpu, **sampler.describe()}
    finally:
        sampler.stop()


def _metrics_available(base: str, headers: dict[str, str]) -> bool:
    try:
        resp = requests.get(f"{base}/metrics", headers=headers, timeout=5)
    except requests.RequestException:
        return False
    return resp.status_code == 200 and "# TYPE" in resp.text[:100_000]


def prepare_templates(book: PromptBook, points: list[Point]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for point in points:
        for length in point.prompt_lengths():
            out.setdefault(point.endpoint, {})[length] = book.template(point.endpoint, length).text
    return out


def run_load(cfg: LoadConfig) -> LoadResult:
    """Measure the server with the suite; write run.json, requests.jsonl, server_metrics.jsonl, loadgen.jsonl."""
    base = check_url(cfg.url)
    if cfg.workers < 0:
        raise UsageError("--workers must be 0 (one process) or more")
    run_dir = Path(cfg.run_dir)
    if (run_dir / REQUESTS_JSONL).exists():
        raise UsageError(f"{run_dir} already holds a run: choose another --out")
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}

    server: ServerInfo = probe(base, api_key=cfg.api_key, model=cfg.model, engine=cfg.engine)
    if cfg.launch:
        server.launch = cfg.launch
    served = server.served_model or cfg.model
    points, context_warnings = fit_context(expand(cfg.suite), _max_model_len(server))
    if not points:
        raise UsageError(f"no point of suite '{cfg.suite.name}' fits the server's context of "
                         f"{_max_model_len(server)} tokens: use shorter prompts and outputs")

    session = requests.Session()
    session.trust_env = False
    session.headers.update(headers)
    book = PromptBook(session, base, served)
    try:
        templates = prepare_templates(book, points)
    except requests.RequestException as exc:
        raise ServerError(f"sizing prompts against {base} failed: {type(exc).__name__}") from None
    server.tokenizer = ", ".join(sorted(set(book.method.values()))) or "unknown"

    run_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).timestamp()
    info = RunInfo(
        cardgen_version=__version__, command=redact_argv(cfg.argv), model=cfg.model, suite=cfg.suite.name,
        suite_spec=cfg.suite.model_dump(mode="json"), started_at=_utc(started), started_unix=started,
        server=server, modelled=cfg.modelled, sim=cfg.sim, gpu=cfg.gpu, workers=cfg.workers,
    )
    info.warnings.extend(context_warnings)
    save_run_info(run_dir, info)

    progress = PointProgress(quiet=cfg.quiet)
    recorder = Recorder(run_dir, on_fatal=lambda exc: None)
    recorder.listeners.append(progress.on_record)
    plan = RunPlan(
        url=base, points=points,
        setup={"model": served, "engine": server.engine, "headers": headers, "templates": templates,
               "nonce": random.randrange(10_000)},
        workers=cfg.workers, remote_workers=cfg.remote_workers, master_bind_host=cfg.master_bind_host,
        master_port=cfg.master_port, on_point_start=progress.start, on_point_end=progress.end,
    )
    engine_txt = f"{server.engine} {server.engine_version or ''}".strip()
    progress.say(f"cardgen {__version__}: measuring {base} ({engine_txt}, model {served}) with suite "
                 f"'{cfg.suite.name}': {len(points)} points -> {run_dir}")
    scrape = _metrics_available(base, headers)
    if not scrape:
        info.warnings.append("the server has no Prometheus /metrics: no server-side figures (KV usage, queue)")
    outcome = None
    try:
        with ExitStack() as stack:
            info.gpu = stack.enter_context(_gpu_telemetry(cfg, base, run_dir))
            save_run_info(run_dir, info)
            if scrape:
                stack.enter_context(Scraper(f"{base}/metrics", run_dir / SERVER_METRICS_JSONL,
                                            interval_s=cfg.scrape_interval_s, api_key=cfg.api_key))
            stack.enter_context(progress)
            outcome = run_plan(plan, recorder)
    finally:
        recorder.close()
        ended = dt.datetime.now(dt.UTC).timestamp()
        info.ended_unix, info.ended_at = ended, _utc(ended)
        info.requests_total, info.requests_failed = recorder.total, recorder.failed
        info.failures_by_kind = dict(recorder.failures_by_kind)
        info.length_mismatches = recorder.length_mismatches
        info.loadgen, lg_warnings = _loadgen_report(recorder)
        info.warnings.extend(lg_warnings)
        if recorder.length_mismatches:
            info.warnings.append(f"{recorder.length_mismatches} requests returned a different number of tokens "
                                 "than forced (the server may not honour ignore_eos/min_tokens)")
        if recorder.fatal is not None:
            info.status = "failed"
        elif outcome is None:
            info.status = "failed"
        elif outcome.interrupted:
            info.status = "interrupted"
        else:
            info.status = "complete"
        save_run_info(run_dir, info)

    failures = ", ".join(f"{k} {v}" for k, v in sorted(recorder.failures_by_kind.items()))
    progress.say(f"requests: {recorder.total} recorded, {recorder.failed} failed" + (f" ({failures})" if failures else ""))
    for warning in info.warnings:
        progress.say(f"warning: {warning}")
    if recorder.fatal is not None:
        raise RunError(f"the recorder failed ({recorder.fatal}); {recorder.total} records are on disk in {run_dir}")
    if outcome is not None and outcome.interrupted:
        raise KeyboardInterrupt
    if recorder.total and recorder.failed == recorder.total:
        raise RunError(f"every request failed ({failures}); see {run_dir / REQUESTS_JSONL}")
    if recorder.total == 0:
        raise RunError("no request was sent")
    return LoadResult(run_dir=run_dir, info=info)
