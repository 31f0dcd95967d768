# ruff: noqa: I001  (locust must be imported first: it monkey-patches the standard library)
"""Measure a server: the load stage of ``cardgen build``, in three steps.

    prepare(cfg) -> Prepared            probe the server, fit the suite's points to it, size the prompts,
                                        write the first run.json ("running")
    prepare_resume(cfg, info)           ... or continue a run that was cut off (``cardgen resume``): only the
                                        points that did not finish, the cut-off one as its next attempt
    execute(prepared) -> Executed       scrape /metrics, sample the GPUs, run the points, record every
                                        request; run.json's heartbeat and finished points while it goes
    finish(prepared, executed)          the final run.json, the tally and warnings, the error to exit with

:func:`run_load` is the three in a row. What ``prepare`` decides can be rebuilt from run.json: its
``suite_spec`` and ``server`` give the same points (:func:`plan_points`), and the same server's tokenizer
gives the same prompts (:func:`size_prompts`); the finished points say what a resumed run may skip.

A resumed run is the same run continued, not a new one: ``execute`` appends to the same files and counts
what the earlier sessions left, ``finish`` writes the tallies of the whole run. Nothing on disk is rewritten:
a point that was cut off is run again as its next ``attempt``, and its earlier records stay in
requests.jsonl, superseded (their ``attempt`` is no longer the point's).

Import this module first in a load-generating process: it imports Locust, which monkey-patches the
standard library for gevent, and that must happen before ``requests``/``ssl`` are imported elsewhere.
"""

from __future__ import annotations

import locust  # noqa: F401  (monkey-patches for gevent: keep first)

import math
import os
import random
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import gevent
import numpy as np
from gevent.event import Event
import requests

from cardgen import __version__
from cardgen.engines.detect import check_url, probe
from cardgen.datasets import resolve
from cardgen.errors import RunError, ServerError, UsageError
from cardgen.gpu import start_gpu_sampler
from cardgen.load.messages import Setup
from cardgen.load.progress import PlanSource, PointProgress
from cardgen.recorder import Recorder
from cardgen.load.runner import RunOutcome, RunPlan, run_plan
from cardgen.load.scraper import Scraper
from cardgen.load.sizing import PromptBook
from cardgen.load.workers import CPU_LIMIT_PERCENT, LOOP_LAG_LIMIT_S, SEND_LAG_LIMIT_S, choose_workers, client_verdict
from cardgen.points import Point, expand, fit_context
from cardgen.rundir import RunDir, check_run_dir, make_run_dir
from cardgen.runinfo import begin_run_info
from cardgen.schemas.records import LoadgenSample, RequestRecord
from cardgen.schemas.run import (
    COMPLETE,
    FAILED,
    INTERRUPTED,
    STOP_SKIPPED,
    PointOutcome,
    RunInfo,
    ServerInfo,
    record_counts,
)
from cardgen.suite import Suite

LOOP_LAG_WARN_S = LOOP_LAG_LIMIT_S
SEND_LAG_WARN_S = SEND_LAG_LIMIT_S
CPU_WARN_PERCENT = CPU_LIMIT_PERCENT
HEARTBEAT_S = 5.0  # how often run.json is re-signed while the load runs (a reader tells a live run by it)


@dataclass(frozen=True, kw_only=True)
class LoadConfig:
    """What ``cardgen build`` asks of the load stage; built once, never changed (derive with ``replace``)."""

    url: str
    model: str
    suite: Suite
    run_dir: Path
    api_key: str | None = None
    workers: int | str = 0  # worker processes, or "auto" (cardgen.load.workers.choose_workers)
    remote_workers: bool = False
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    scrape_interval_s: float = 0.5
    quiet: bool = False
    argv: tuple[str, ...] = field(default_factory=lambda: tuple(sys.argv))
    engine: str | None = None  # force the engine instead of detecting it
    modelled: bool = False
    sim: Mapping[str, Any] | None = None
    gpu: Mapping[str, Any] = field(default_factory=dict)
    launch: Mapping[str, Any] | None = None
    gpu_metrics_url: str | None = None  # a DCGM exporter's /metrics for a GPU on another host
    plan: PlanSource | None = None  # the cost plan, when known: the progress shows time left against it
    run_saturated: bool = False  # run the parallel counts a saturated point would skip


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What the load will do, decided before any load: the server, the points, the prompts."""

    cfg: LoadConfig
    base_url: str
    server: ServerInfo  # as probed, with how prompts were sized (``tokenizer``) and the launch
    points: tuple[Point, ...]
    setup: Setup  # what every agent gets: model, headers (the API key: never saved), templates, nonce
    info: RunInfo  # run.json as first written (resumed: as this session first wrote it)
    # which attempt of each point of the run counts (all 0 in a new run); records of another attempt are
    # superseded
    attempts: Mapping[str, int] = field(default_factory=dict)
    resumed: bool = False  # continues a run: ``points`` are those left to run, the files hold earlier sessions
    points_done: int = 0  # resumed: the points earlier sessions finished (or skipped), not sent again


@dataclass(frozen=True, kw_only=True)
class Executed:
    """What the load did. ``error`` is what cut it short (a lost worker, Ctrl-C before the points ran...):
    :func:`finish` writes run.json first and raises it then."""

    info: RunInfo  # run.json as the load left it (GPU telemetry, warnings), still "running"
    outcome: RunOutcome | None
    recorder: Recorder  # closed: its tallies are what is on disk
    points: tuple[PointOutcome, ...]  # run.json's points as the load left them
    error: BaseException | None = None


@dataclass(frozen=True)
class LoadResult:
    run_dir: Path
    info: RunInfo


def run_load(cfg: LoadConfig) -> LoadResult:
    """Measure the server with the suite; write run.json, requests.jsonl, server_metrics.jsonl, loadgen.jsonl."""
    prepared = prepare(cfg)
    return finish(prepared, execute(prepared))


# -- prepare -------------------------------------------------------------------------------------------------

def plan_points(suite: Suite, server: ServerInfo) -> tuple[list[Point], list[str]]:
    """The suite's points that fit the server's context, and a warning for each one left out."""
    max_len = max_model_len(server)
    points, warnings = fit_context(expand(suite), max_len)
    if not points:
        raise UsageError(f"no point of suite '{suite.name}' fits the server's context of {max_len} tokens: use "
                         "shorter prompts and outputs")
    return points, warnings


def size_prompts(base_url: str, headers: Mapping[str, str], served_model: str,
                 points: Sequence[Point]) -> tuple[dict[str, dict[int, str]], str]:
    """A prompt template of exactly each length the points send, per endpoint, sized by the server; and how
    they were sized (``server /tokenize`` or ``usage.prompt_tokens calibration``)."""
    session = requests.Session()
    session.trust_env = False
    session.headers.update(headers)
    book = PromptBook(session, base_url, served_model)
    templates: dict[str, dict[int, str]] = {}
    try:
        for point in points:
            for length in point.prompt_lengths():
                templates.setdefault(point.endpoint, {})[length] = book.template(point.endpoint, length).text
    except requests.RequestException as exc:
        raise ServerError(f"sizing prompts against {base_url} failed: {type(exc).__name__}") from None
    return templates, ", ".join(sorted(set(book.method.values()))) or "unknown"


def sample_datasets(base_url: str, headers: Mapping[str, str], served_model: str, points: Sequence[Point],
                    max_len: int | None, *, nonce: int = 0) -> dict[str, list[str]]:
    """The prompts of the points that bring their own (``cardgen.datasets.resolve``: dataset samples and
    shared prefixes, marked with the run's ``nonce``; fills each point's ``items``), counted by the server's
    tokenizer; the prompt templates by :meth:`Point.text_key`."""

    if not any(p.dataset is not None or p.kind == "prefix" for p in points):
        return {}
    session = requests.Session()
    session.trust_env = False
    session.headers.update(headers)
    book = PromptBook(session, base_url, served_model)
    try:
        return resolve(points, counter=book.counter, max_model_len=max_len, tag=nonce)
    except requests.RequestException as exc:
        raise ServerError(f"counting dataset prompts against {base_url} failed: {type(exc).__name__}") from None


def prepare(cfg: LoadConfig) -> Prepared:
    """Probe the server, fit the points, size the prompts, create the run directory (and its parents) and
    write the first run.json. Nothing is sent to the server but questions and tokenizations."""
    base = check_url(cfg.url)
    resolve_workers(cfg, ())
    run_dir = Path(cfg.run_dir)
    check_run_dir(run_dir)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}

    server = probe(base, api_key=cfg.api_key, model=cfg.model, engine=cfg.engine)
    served = server.served_model or cfg.model
    points, context_warnings = plan_points(cfg.suite, server)
    cfg, workers_choice = resolve_workers(cfg, points)
    templates, tokenizer = size_prompts(base, headers, served, points)
    nonce = random.randrange(10_000)
    dataset_texts = sample_datasets(base, headers, served, points, max_model_len(server), nonce=nonce)
    server = server.model_copy(update={"tokenizer": tokenizer,
                                       "launch": dict(cfg.launch) if cfg.launch else server.launch})

    make_run_dir(run_dir)
    started = time.time()
    info = begin_run_info(argv=cfg.argv, model=cfg.model, suite=cfg.suite, server=server, started_unix=started,
                          clock="real", modelled=cfg.modelled, gpu=cfg.gpu, sim=cfg.sim, workers=int(cfg.workers),
                          workers_choice=workers_choice, warnings=context_warnings,
                          points=[PointOutcome(name=p.name, kind=p.kind) for p in points])  # none reached yet
    RunDir(run_dir).save_run_info(info)
    setup = Setup(model=served, engine=server.engine, headers=headers, templates=templates,
                  dataset_texts=dataset_texts, nonce=nonce)
    return Prepared(cfg=cfg, base_url=base, server=server, points=tuple(points), setup=setup,
                    info=info.model_copy(deep=True), attempts={p.name: 0 for p in points})


def resolve_workers(cfg: LoadConfig, points: Sequence[Point]) -> tuple[LoadConfig, str | None]:
    """``cfg`` with its worker processes as a number (``auto`` chosen for ``points`` on this machine's cores),
    and why auto chose that; a one-line UsageError for a count that cannot be."""
    if cfg.workers == "auto":
        if cfg.remote_workers:
            raise UsageError("--workers auto counts this machine's cores: give the number of remote workers")
        choice = choose_workers(points, cores=os.cpu_count() or 1)
        return replace(cfg, workers=choice.workers), choice.reason
    if not isinstance(cfg.workers, int) or cfg.workers < 0:
        raise UsageError("--workers must be 0 (one process), more, or auto")
    return cfg, None


def max_model_len(server: ServerInfo) -> int | None:
    """The served model's context length as ``/v1/models`` gives it (vLLM, SGLang, the virtual server)."""
    if isinstance(server.models, dict):
        for entry in server.models.get("data") or ():
            if isinstance(entry, dict) and entry.get("id") == server.served_model:
                value = entry.get("max_model_len")
                return value if isinstance(value, int) and value > 0 else None
    return None


# -- execute -------------------------------------------------------------------------------------------------

def execute(prepared: Prepared) -> Executed:
    """Run every point against the server while /metrics is scraped and the GPUs are sampled; every request is
    on disk the moment it ends. Returns what happened, also when it was cut short (see :class:`Executed`)."""
    cfg, base = prepared.cfg, prepared.base_url
    run_dir = Path(cfg.run_dir)
    files = RunDir(run_dir)
    info = prepared.info.model_copy(deep=True)
    progress = PointProgress(quiet=cfg.quiet, plan=cfg.plan, points=[p.name for p in prepared.points])
    server = prepared.server
    engine_txt = f"{server.engine} {server.engine_version or ''}".strip()
    if prepared.resumed:
        progress.say(f"cardgen {__version__}: resuming {run_dir} against {base} ({engine_txt}, model "
                     f"{prepared.setup.model}): {prepared.points_done} points done, {len(prepared.points)} to run")
    else:
        progress.say(f"cardgen {__version__}: measuring {base} ({engine_txt}, model {prepared.setup.model}) with "
                     f"suite '{cfg.suite.name}': {len(prepared.points)} points -> {run_dir}")
    scrape = _metrics_available(base, prepared.setup.headers)
    if not scrape:
        info.warnings.append("the server has no Prometheus /metrics: no server-side figures (KV usage, queue)")

    recorder = Recorder(run_dir)
    if prepared.resumed:
        _count_earlier(recorder, files, prepared.attempts)
    recorder.listeners.append(progress.on_record)
    heartbeat = _Heartbeat(files, info)

    def keep_point(outcome: PointOutcome) -> None:
        """run.json's ``points`` (saved by the heartbeat): the point's entry replaced, or appended."""
        names = [p.name for p in info.points]
        if outcome.name in names:
            info.points[names.index(outcome.name)] = outcome
        else:
            info.points.append(outcome)
        heartbeat.changed()

    def point_started(point: Point, outcome: PointOutcome) -> None:
        keep_point(outcome)
        progress.start(point)

    def point_ended(point: Point, outcome: PointOutcome) -> None:
        keep_point(outcome)
        if outcome.stop == STOP_SKIPPED:
            progress.say(f"{point.name}: {outcome.detail}")
        else:
            progress.end(point)

    plan = RunPlan(url=base, points=prepared.points, setup=prepared.setup, workers=int(cfg.workers),
                   remote_workers=cfg.remote_workers, master_bind_host=cfg.master_bind_host,
                   master_port=cfg.master_port, server_metrics=files.server_metrics_jsonl if scrape else None,
                   attempts=prepared.attempts, run_saturated=cfg.run_saturated, on_point_start=point_started,
                   on_point_end=point_ended)
    outcome: RunOutcome | None = None
    error: BaseException | None = None
    try:
        with ExitStack() as stack:
            info.gpu = stack.enter_context(_gpu_telemetry(cfg, base, run_dir))
            files.save_run_info(info)
            if scrape:
                stack.enter_context(Scraper(f"{base}/metrics", files.server_metrics_jsonl,
                                            interval_s=cfg.scrape_interval_s, api_key=cfg.api_key))
            stack.enter_context(progress)
            stack.enter_context(heartbeat)
            outcome = run_plan(plan, recorder)  # returns once every agent has stopped sending
    except BaseException as exc:  # noqa: BLE001 - finish() writes run.json, then raises it
        error = exc
    try:
        recorder.close()
    except OSError as exc:
        if outcome is not None and outcome.fatal is None:
            outcome.fatal = f"requests.jsonl could not be closed: {exc}"
    return Executed(info=info, outcome=outcome, recorder=recorder, points=tuple(info.points), error=error)


def _count_earlier(recorder: Recorder, files: RunDir, attempts: Mapping[str, int]) -> None:
    """Tally what the earlier sessions of a resumed run left on disk; a record counts when its attempt is the
    one its point's counts."""
    records = files.load_jsonl(files.requests_jsonl.name, RequestRecord) if files.requests_jsonl.exists() else []
    samples = files.load_jsonl(files.loadgen_jsonl.name, LoadgenSample) if files.loadgen_jsonl.exists() else []
    recorder.count_earlier(records, samples, counts=lambda rec: record_counts(attempts, rec.scenario, rec.attempt))


class _Heartbeat:
    """While the load runs, re-save run.json every :data:`HEARTBEAT_S` seconds and soon after a point starts or
    ends, so a reader can tell a live run from one killed without a word. The file is written in a thread of
    gevent's pool: an fsync must not stall the event loop that stamps chunk arrivals."""

    def __init__(self, files: RunDir, info: RunInfo) -> None:
        self.files, self.info = files, info
        self._dirty = False
        self._stopping = False
        self._wake = Event()
        self._greenlet: gevent.Greenlet | None = None

    def changed(self) -> None:
        self._dirty = True

    def _loop(self) -> None:
        pool = gevent.get_hub().threadpool
        last = time.monotonic()
        while not self._stopping:
            self._wake.wait(timeout=0.5)
            if self._stopping:
                return
            if self._dirty or time.monotonic() - last >= HEARTBEAT_S:
                self._dirty, last = False, time.monotonic()
                pool.apply(self.files.save_run_info, (self.info.model_copy(deep=True),))

    def __enter__(self) -> _Heartbeat:
        self._greenlet = gevent.spawn(self._loop)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop after a save in progress (never kill it: a late save would overwrite the final run.json)."""
        self._stopping = True
        self._wake.set()
        if self._greenlet is not None:
            self._greenlet.join()
            self._greenlet = None


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

    sampler = start_gpu_sampler(run_dir, dcgm_url=cfg.gpu_metrics_url)
    try:
        yield {**cfg.gpu, **sampler.describe()}
    finally:
        sampler.stop()


def _metrics_available(base: str, headers: Mapping[str, str]) -> bool:
    try:
        resp = requests.get(f"{base}/metrics", headers=dict(headers), timeout=5)
    except requests.RequestException:
        return False
    return resp.status_code == 200 and "# TYPE" in resp.text[:100_000]


# -- finish --------------------------------------------------------------------------------------------------

def finish(prepared: Prepared, executed: Executed) -> LoadResult:
    """Write the final run.json (status, tallies, the load generator's percentiles, warnings), print the tally,
    and raise when the run failed: what cut it short, a record that could not be written (with the number on
    disk), an interrupt, or no request that succeeded."""
    files = RunDir(prepared.cfg.run_dir)
    requests_jsonl = files.requests_jsonl
    recorder, outcome, error = executed.recorder, executed.outcome, executed.error
    fatal = outcome.fatal if outcome is not None else None
    info = executed.info.model_copy(deep=True)
    info.points = [_judge_client(recorder, p) for p in info.points]
    info.loadgen, loadgen_warnings = _loadgen_report(recorder, info.points)
    info.warnings.extend(loadgen_warnings)
    if isinstance(error, KeyboardInterrupt) or (error is None and fatal is None and outcome is not None
                                                and outcome.interrupted):
        status = INTERRUPTED
    elif error is not None or fatal is not None or outcome is None:
        status = FAILED
    else:
        status = COMPLETE
    recorder.tally.end(info, ended_unix=time.time(), status=status)
    files.save_run_info(info)

    progress = PointProgress(quiet=prepared.cfg.quiet)
    failures = ", ".join(f"{k} {v}" for k, v in sorted(recorder.tally.failures_by_kind.items()))
    progress.say(f"requests: {recorder.total} recorded, {recorder.failed} failed"
                 + (f" ({failures})" if failures else "")
                 + (f"; {recorder.superseded} superseded (kept)" if recorder.superseded else ""))
    for warning in info.warnings:
        progress.say(f"warning: {warning}")
    if error is not None:
        raise error
    if fatal is not None:
        raise RunError(f"the run stopped because {fatal}; {recorder.on_disk} records are on disk in {requests_jsonl}")
    if outcome is not None and outcome.interrupted:
        raise KeyboardInterrupt
    if recorder.total and recorder.failed == recorder.total:
        raise RunError(f"every request failed ({failures}); see {requests_jsonl}")
    if recorder.total == 0:
        raise RunError("no request was sent")
    return LoadResult(run_dir=files.path, info=info)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _judged(point: PointOutcome) -> bool:
    """Whether the client's timings matter to ``point``: it ran, and it is no wave (waves probe the KV cache by
    what the server says: queueing, preemption)."""
    return point.kind != "waves" and point.started_unix is not None


def _during(point: PointOutcome, times: Sequence[float], values: Sequence[float]) -> list[float]:
    """The load generator's samples taken while ``point`` ran (to now, when it was cut off)."""
    assert point.started_unix is not None
    start, end = point.started_unix, point.ended_unix if point.ended_unix is not None else math.inf
    return [v for t, v in zip(times, values, strict=True) if start <= t <= end]


def _judge_client(recorder: Recorder, point: PointOutcome) -> PointOutcome:
    """``point`` with whether the load generator kept up while it ran (:func:`client_verdict` on the samples of
    every process taken between its start and end)."""
    if not _judged(point):
        return point
    kept_up, words = client_verdict(loop_lags_s=_during(point, recorder.loop_lag_times, recorder.loop_lags_s),
                                    cpu_percents=_during(point, recorder.cpu_times, recorder.cpu_percents),
                                    send_lags_s=recorder.send_lags_by_point.get(point.name, []))
    return point.model_copy(update={"client_kept_up": kept_up, "client": words})


def _loadgen_report(recorder: Recorder, points: Sequence[PointOutcome] = ()) -> tuple[dict[str, Any], list[str]]:
    """Percentiles of event-loop lag, send lag and CPU, and warnings when the client was the bottleneck: per
    point, the verdict :func:`_judge_client` gave it (``points`` are judged); without points, the whole run's."""
    lags, cpus, send_lags = recorder.loop_lags_s, recorder.cpu_percents, recorder.send_lags_s
    report = {
        "loop_lag_p50_s": _pct(lags, 50), "loop_lag_p95_s": _pct(lags, 95), "loop_lag_p99_s": _pct(lags, 99),
        "loop_lag_max_s": max(lags, default=None),
        "send_lag_p50_s": _pct(send_lags, 50), "send_lag_p99_s": _pct(send_lags, 99),
        "cpu_percent_p50": _pct(cpus, 50), "cpu_percent_max": max(cpus, default=None),
        "samples": len(lags),
    }
    warnings = []
    behind = [f"{p.name} ({p.client})" for p in points if p.client_kept_up is False] if points else None
    if behind:
        warnings.append(f"the load generator fell behind during {len(behind)} point(s), whose client-side timings "
                        f"may be late: {'; '.join(behind)}; use --workers N to spread the load, or a machine where "
                        "the server does not share the cores")
    elif behind is None and report["loop_lag_p95_s"] is not None and report["loop_lag_p95_s"] > LOOP_LAG_WARN_S:
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
