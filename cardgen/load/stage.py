# ruff: noqa: I001  (locust must be imported first: it monkey-patches the standard library)
"""Measure a server: the load stage of ``cardgen build``, in three steps.

    prepare(cfg) -> Prepared            probe the server, fit the run's points to it, size the prompts,
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
what the earlier sessions left, ``finish`` writes the tallies of the whole run (both through the run's
:class:`~cardgen.runwriter.RunWriter`). Nothing on disk is rewritten:
a point that was cut off is run again as its next ``attempt``, and its earlier records stay in
requests.jsonl, superseded (their ``attempt`` is no longer the point's).

Import this module first in a load-generating process: it imports Locust, which monkey-patches the
standard library for gevent, and that must happen before ``requests``/``ssl`` are imported elsewhere.
"""

from __future__ import annotations

import locust  # noqa: F401  (monkey-patches for gevent: keep first)

import os
import random
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from cardgen import __version__
from cardgen.engines.detect import probe
from cardgen.engines.registry import get_adapter
from cardgen.datasets import resolve
from cardgen.errors import RunError, ServerError, UsageError
from cardgen.load.clientcheck import judge_client, loadgen_report
from cardgen.load.heartbeat import Heartbeat
from cardgen.load.messages import Setup
from cardgen.load.progress import PlanSource, PointProgress
from cardgen.load.runner import LoadPlan, RunOutcome, run_plan
from cardgen.load.wake import not_held_warnings
from cardgen.load.scraper import Scraper
from cardgen.load.telemetry import gpu_telemetry, metrics_available
from cardgen.load.dialect import agree
from cardgen.load.sizing import PromptBook
from cardgen.load.workers import choose_workers
from cardgen.points import Point, fit_context, left_out
from cardgen.runinfo import RunPlan, begin_run_info
from cardgen.runwriter import RunWriter
from cardgen.schemas.run import COMPLETE, FAILED, INTERRUPTED, PointOutcome, RequestDialect, RunInfo, ServerInfo
from cardgen.stops import STOP_SKIPPED


@dataclass(frozen=True, kw_only=True)
class LoadConfig:
    """What the load stage is given: the run's :class:`~cardgen.runinfo.RunPlan` (checked once, by the command
    line, before it was made), and beside it what no plan holds: the server's API key (a secret, never saved)
    and the cost plan the progress shows time left against (known only once the load is under way)."""

    plan: RunPlan
    api_key: str | None = field(default=None, repr=False)
    time_plan: PlanSource | None = None


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What the load will do, decided before any load: the server, the points, the prompts."""

    cfg: LoadConfig
    base_url: str
    server: ServerInfo  # as probed, with how prompts were sized (``tokenizer``) and the launch
    points: tuple[Point, ...]  # those that run: the plan's that fit the server (resumed: those left)
    workers: int  # Locust worker processes (``auto`` chosen for the points; 0: the load in this process)
    setup: Setup  # what every agent gets: model, headers (the API key: never saved), templates, nonce
    writer: RunWriter  # the run's files: run.json as first written (resumed: as this session first wrote it)
    # which attempt of each point of the run counts (all 0 in a new run); records of another attempt are
    # superseded
    attempts: Mapping[str, int] = field(default_factory=dict)
    resumed: bool = False  # continues a run: ``points`` are those left to run, the files hold earlier sessions
    points_done: int = 0  # resumed: the points earlier sessions finished (or skipped), not sent again
    phase: str | None = None  # a calibrated run's next phase (cardgen.calibrated): what it measures, in words


@dataclass(frozen=True, kw_only=True)
class Executed:
    """What the load did (run.json as it left it, still "running", and its closed recorder are the prepared
    run's writer's). ``error`` is what cut it short (a lost worker, Ctrl-C before the points ran...):
    :func:`finish` writes run.json first and raises it then."""

    outcome: RunOutcome | None
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

def plan_points(plan: RunPlan, server: ServerInfo) -> tuple[list[Point], list[str], dict[str, str]]:
    """The plan's points that fit the server's context per request, a warning for each one shortened (an
    ingestion sweep's lengths that do not fit), and the points left out whole with why (run.json: not run)."""
    max_len = max_model_len(server)
    every = list(plan.points)
    points, warnings = fit_context(every, max_len)
    source = server.context.source if server.context is not None else None
    unfit = left_out(every, max_len, source=source)
    if not points:
        raise UsageError(f"no point of suite '{plan.suite.name}' fits the server's context of {max_len} tokens per request"
                         f"{f' ({source})' if source else ''}: use shorter prompts and outputs")
    warnings = [w for w in warnings if not any(w.startswith(f"{name} left out") for name in unfit)]
    if max_len is None:
        warnings.append("the server states no context per request: no point was checked against one (a request "
                        "longer than the server takes fails, and is recorded as failed)")
    return points, warnings, unfit


def _session(headers: Mapping[str, str]) -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    session.headers.update(headers)
    return session


def prompt_book(base_url: str, headers: Mapping[str, str], served_model: str) -> PromptBook:
    """The run's prompt book: how the server counts prompts, asked once for sizing and the datasets alike."""
    return PromptBook(_session(headers), base_url, served_model)


def size_prompts(book: PromptBook, points: Sequence[Point]) -> dict[str, dict[int, str]]:
    """A prompt template of exactly each length the points send, per endpoint, sized by the server's own count
    (the ``/tokenize`` form checked against ``usage.prompt_tokens``, or that usage itself: :mod:`cardgen.load.sizing`;
    ``book.describe()`` says which)."""
    templates: dict[str, dict[int, str]] = {}
    try:
        for point in points:
            for length in point.prompt_lengths():
                templates.setdefault(point.endpoint, {})[length] = book.template(point.endpoint, length).text
    except requests.RequestException as exc:
        raise ServerError(f"sizing prompts against {book.base} failed: {_why(exc)}") from None
    return templates


def id_style(book: PromptBook, points: Sequence[Point]) -> str:
    """How the run writes request ids (:meth:`PromptBook.style`), asked of the first point's endpoint."""
    try:
        return book.style(points[0].endpoint if points else "completions")
    except requests.RequestException as exc:
        raise ServerError(f"counting request ids against {book.base} failed: {_why(exc)}") from None


def agree_dialect(book: PromptBook, points: Sequence[Point], engine: str) -> RequestDialect:
    """The fields beyond the OpenAI API that the run's requests will carry (:func:`cardgen.load.dialect.agree`);
    its requests counted with the book's."""
    endpoint = points[0].endpoint if points else "completions"
    base_url = book.base
    try:
        return agree(book.session, base_url, model=book.model, endpoint=endpoint, adapter=get_adapter(engine),
                     probes=book.probes)
    except requests.RequestException as exc:
        raise ServerError(f"asking {base_url} which request fields it takes failed: {_why(exc)}") from None


def _why(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code} from {exc.response.request.path_url if exc.response.request else ''}"
    return type(exc).__name__


def sample_datasets(book: PromptBook, points: Sequence[Point], max_len: int | None, *,
                    nonce: int = 0) -> tuple[list[Point], dict[str, list[str]]]:
    """The prompts of the points that bring their own (``cardgen.datasets.resolve``: dataset samples and
    shared prefixes, marked with the run's ``nonce``), counted by the server's tokenizer: the points with their
    ``items``, and the prompt templates by :meth:`Point.text_key`."""
    if not any(p.brings_prompts for p in points):
        return list(points), {}
    try:
        return resolve(points, counter=book.counter, max_model_len=max_len, tag=nonce, style=id_style(book, points))
    except requests.RequestException as exc:
        raise ServerError(f"counting dataset prompts against {book.base} failed: {_why(exc)}") from None


def prepare(cfg: LoadConfig) -> Prepared:
    """Probe the server, fit the points, size the prompts, create the run directory (and its parents) and
    write the first run.json. Nothing is sent to the server but questions and tokenizations. The plan was
    checked as it was made (its URL, workers and run directory): nothing is checked again here."""
    plan = cfg.plan
    base = plan.url
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}

    server = with_launch(probe(base, api_key=cfg.api_key, model=plan.model, engine=plan.engine), plan.launch)
    served = server.served_model or plan.model
    points, context_warnings, unfit = plan_points(plan, server)
    workers, workers_choice = resolve_workers(plan, points)
    book = prompt_book(base, headers, served)
    style = id_style(book, points)
    templates = size_prompts(book, points)
    dialect = agree_dialect(book, points, server.engine)
    nonce = random.randrange(10_000)
    points, dataset_texts = sample_datasets(book, points, max_model_len(server), nonce=nonce)
    server = server.model_copy(update={"tokenizer": book.describe(), "dialect": dialect, "id_style": style,
                                       "probes": book.probes.by_purpose})
    warnings = [*context_warnings, *dialect_warnings(dialect, server)]
    if book.id_spread:
        warnings.append(f"the server counts request ids of the same width as up to {book.id_spread} tokens apart "
                        "in every style cardgen writes them: prompts may miss their length by that much (the "
                        "records keep the server's count)")

    started = time.time()
    runnable = {p.name for p in points}
    outcomes = [PointOutcome(name=p.name, kind=p.kind) if p.name in runnable else  # none reached yet
                PointOutcome(name=p.name, kind=p.kind, stop=STOP_SKIPPED, detail=unfit[p.name])
                for p in plan.points if p.name in runnable or p.name in unfit]
    info = begin_run_info(argv=plan.argv, model=plan.model, suite=plan.suite, server=server, started_unix=started,
                          clock="real", modelled=plan.modelled, gpu=plan.gpu, sim=plan.sim, workers=workers,
                          workers_choice=workers_choice, warnings=warnings, points=outcomes, build=plan.build,
                          price=plan.price)
    writer = RunWriter.begin(plan.run_dir, info)
    setup = Setup(model=served, engine=server.engine, headers=headers, templates=templates,
                  dataset_texts=dataset_texts, nonce=nonce, length_fields=dialect.length_fields,
                  cold_fields=dialect.cold_fields, id_style=style)
    return Prepared(cfg=cfg, base_url=base, server=server, points=tuple(points), workers=workers, setup=setup,
                    writer=writer, attempts={p.name: 0 for p in points})


def with_launch(server: ServerInfo, launch: Mapping[str, Any] | None) -> ServerInfo:
    """The probed server with how cardgen started it, and what the engine's log said of its configuration
    (``extra["log"]``, where the adapter reads what no endpoint says: llama.cpp's unified KV cache)."""
    if not launch:
        return server
    reported = launch.get("server_reported")
    extra = {**server.extra, "log": dict(reported)} if reported else server.extra
    return server.model_copy(update={"launch": dict(launch), "extra": extra})


def dialect_warnings(dialect: RequestDialect, server: ServerInfo) -> list[str]:
    """run.json's warnings about fields the server refused: what it means for the figures."""
    out = []
    refused = ", ".join(sorted(dialect.rejected))
    if dialect.rejected and not dialect.length_fields:
        out.append(f"the server refused {refused} ({next(iter(dialect.rejected.values()))}): nothing forces an "
                   "output to its target length, so outputs may end early (the card counts how many did)")
    elif dialect.rejected:
        out.append(f"the server refused {refused} ({next(iter(dialect.rejected.values()))}); the requests carry "
                   f"{', '.join(dialect.length_fields)} instead")
    return out


def resolve_workers(plan: RunPlan, points: Sequence[Point]) -> tuple[int, str | None]:
    """The plan's worker processes as a number (``auto`` chosen for ``points`` on this machine's cores), and
    why auto chose that (the count itself was checked when the command line was parsed)."""
    workers = plan.load.workers
    if workers == "auto":
        choice = choose_workers(points, cores=os.cpu_count() or 1)
        return choice.workers, choice.reason
    return workers if isinstance(workers, int) else 0, None


def max_model_len(server: ServerInfo) -> int | None:
    """The served model's context length as ``/v1/models`` gives it (vLLM, SGLang, the virtual server)."""
    return server.context_length()


# -- execute -------------------------------------------------------------------------------------------------

def execute(prepared: Prepared) -> Executed:
    """Run every point against the server while /metrics is scraped and the GPUs are sampled; every request is
    on disk the moment it ends. Returns what happened, also when it was cut short (see :class:`Executed`)."""
    cfg, base = prepared.cfg, prepared.base_url
    plan, load = cfg.plan, cfg.plan.load
    run_dir = Path(plan.run_dir)
    writer = prepared.writer
    files, info = writer.files, writer.info
    progress = PointProgress(quiet=plan.quiet, plan=cfg.time_plan, points=[p.name for p in prepared.points])
    server = prepared.server
    engine_txt = f"{server.engine} {server.engine_version or ''}".strip()
    if prepared.phase:
        progress.say(f"cardgen {__version__}: {prepared.phase}: {len(prepared.points)} points against {base} "
                     f"({engine_txt}, model {prepared.setup.model}) -> {run_dir}")
    elif prepared.resumed:
        progress.say(f"cardgen {__version__}: resuming {run_dir} against {base} ({engine_txt}, model "
                     f"{prepared.setup.model}): {prepared.points_done} points done, {len(prepared.points)} to run")
    else:
        progress.say(f"cardgen {__version__}: measuring {base} ({engine_txt}, model {prepared.setup.model}) with "
                     f"suite '{plan.suite.name}': {len(prepared.points)} points -> {run_dir}")
    scrape = metrics_available(base, prepared.setup.headers)
    if not scrape:
        info.warnings.append("the server has no Prometheus /metrics: no server-side figures (KV usage, queue)")

    recorder = writer.open(prepared.attempts)  # a resumed run's: what earlier sessions left counted first
    recorder.listeners.append(progress.on_record)
    heartbeat = Heartbeat(writer)

    def keep_point(outcome: PointOutcome) -> None:
        """run.json's ``points``, saved by the heartbeat (off the event loop)."""
        writer.put_points(outcome, save=False)
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

    load_plan = LoadPlan(url=base, points=prepared.points, setup=prepared.setup, workers=prepared.workers, load=load,
                         run_dir=run_dir, server_metrics=files.server_metrics_jsonl if scrape else None,
                         attempts=prepared.attempts, on_point_start=point_started, on_point_end=point_ended)
    outcome: RunOutcome | None = None
    error: BaseException | None = None
    try:
        with ExitStack() as stack:
            info.gpu = stack.enter_context(gpu_telemetry(  # type: ignore[assignment]  # validate_assignment converts the dict
                base, run_dir, gpu=plan.gpu, modelled=plan.modelled, gpu_metrics_url=load.gpu_metrics_url))
            writer.save()
            if scrape:
                stack.enter_context(Scraper(f"{base}/metrics", files.server_metrics_jsonl,
                                            interval_s=load.scrape_interval_s, api_key=cfg.api_key))
            stack.enter_context(progress)
            stack.enter_context(heartbeat)
            outcome = run_plan(load_plan, recorder)  # returns once every agent has stopped sending
    except BaseException as exc:  # finish() writes run.json, then raises it
        error = exc
    try:
        writer.close()
    except OSError as exc:
        if outcome is not None and outcome.fatal is None:
            outcome.fatal = f"requests.jsonl could not be closed: {exc}"
    return Executed(outcome=outcome, error=error)


# -- finish --------------------------------------------------------------------------------------------------

def finish(prepared: Prepared, executed: Executed) -> LoadResult:
    """Write the final run.json (status, tallies, the load generator's percentiles, warnings), print the tally,
    and raise when the run failed: what cut it short, a record that could not be written (with the number on
    disk), an interrupt, or no request that succeeded."""
    writer = prepared.writer
    files, info, recorder = writer.files, writer.info, writer.recorder
    requests_jsonl = files.requests_jsonl
    outcome, error = executed.outcome, executed.error
    fatal = outcome.fatal if outcome is not None else None
    info.points = [judge_client(recorder, p) for p in info.points]
    info.loadgen, loadgen_warnings = loadgen_report(recorder, info.points)  # type: ignore[assignment]  # validate_assignment converts the dict
    info.warnings.extend(loadgen_warnings)
    info.warnings.extend(outcome.worker_errors if outcome is not None else ())
    if outcome is not None:
        info.loadgen.cpus_awake = outcome.cpus_awake
        info.warnings.extend(not_held_warnings([("this machine", outcome.cpus_awake),
                                                *((f"load worker {w.name}'s host", w.cpus_awake)
                                                  for w in outcome.workers)]))
    if outcome is not None and outcome.workers:  # a resumed run's workers follow the earlier sessions'
        session = max((w.session for w in info.load_workers), default=-1) + 1
        info.load_workers = [*info.load_workers, *(w.model_copy(update={"session": session}) for w in outcome.workers)]
        info.warnings.extend(f"load worker {w.name} was lost: {w.lost}; its {w.lost_requests} requests in flight "
                             "are recorded as lost (superseded, with the rest of the point's attempt, once "
                             "'cardgen resume' runs the point again)" for w in outcome.workers if w.lost)
    if isinstance(error, KeyboardInterrupt) or (error is None and fatal is None and outcome is not None
                                                and outcome.interrupted):
        status = INTERRUPTED
    elif error is not None or fatal is not None or outcome is None:
        status = FAILED
    else:
        status = COMPLETE
    writer.end(status, ended_unix=time.time())

    progress = PointProgress(quiet=prepared.cfg.plan.quiet)
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
    return LoadResult(run_dir=files.path, info=info.model_copy(deep=True))


