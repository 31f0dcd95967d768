# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which monkey-patches the standard library)
"""Resuming a run: which runs may be continued, and what a resumed run does (:func:`prepare_resume`); the
load stage's :func:`~cardgen.load.stage.execute` and :func:`~cardgen.load.stage.finish` then run it as any other,
appending to the same files."""

from __future__ import annotations

from cardgen.load.stage import (
    LoadConfig,
    Prepared,
    check_url,
    max_model_len,
    plan_points,
    resolve_workers,
    sample_datasets,
    size_prompts,
    status_words,
)  # first: monkey-patches for gevent

import random
import time
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from cardgen.engines import probe
from cardgen.errors import ServerError, UsageError
from cardgen.load.messages import Setup
from cardgen.load.recorder import set_torn_tail_aside
from cardgen.rundir import RunDir, effective_status
from cardgen.runinfo import utc_text
from cardgen.schemas.run import COMPLETE, RUNNING, STALE, PointOutcome, RunInfo
from cardgen.suite import Suite


def check_resumable(run_dir: Path) -> RunInfo:
    """run.json of a run ``cardgen resume`` may continue; a one-line UsageError for one it may not (complete,
    still running, or written before runs recorded their points). A ``running`` run whose writer is gone is
    marked ``died`` on disk first (:meth:`RunDir.mark_died`). Returns run.json with its effective status."""
    files = RunDir(run_dir)
    info = files.mark_died()
    status = effective_status(info)
    if status == RUNNING:
        raise UsageError(f"{run_dir} is still running (pid {info.pid} on {info.hostname}): let it end, or stop it "
                         "before resuming it")
    if status == COMPLETE:
        raise UsageError(f"{run_dir} is complete: nothing to resume (its card: cardgen render {run_dir})")
    if not info.points:
        raise UsageError(f"{run_dir} was written by a cardgen that did not record which points finished: it "
                         "cannot be resumed; measure again with cardgen build")
    return info.model_copy(update={"status": status})


def suite_of(info: RunInfo) -> Suite:
    """The suite a run was measured with, from run.json's ``suite_spec``."""
    try:
        return Suite.model_validate(info.suite_spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "suite"
        raise UsageError(f"run.json's suite_spec is not a suite this cardgen reads ({where}: {first['msg']}): "
                         "resume it with the cardgen that started it") from None


def prepare_resume(cfg: LoadConfig, info: RunInfo) -> Prepared:
    """Continue the run in ``cfg.run_dir`` whose run.json is ``info`` (from :func:`check_resumable`) against
    the server at ``cfg.url``: the same points as the run planned, less those that ended (:func:`has_ended`);
    the point that was cut off runs again as its next attempt, points never reached as they were. The model,
    suite and GPU are the run's, whatever ``cfg`` says. run.json says ``running`` again, signed by this
    process, with a warning that says what was resumed."""
    base = check_url(cfg.url)
    resolve_workers(cfg, ())
    run_dir = Path(cfg.run_dir)
    files = RunDir(run_dir)
    cfg = replace(cfg, model=info.model, suite=suite_of(info), modelled=info.modelled, sim=info.sim,
                  gpu=dict(info.gpu))
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    was = info.server
    served = was.served_model or info.model
    server = probe(base, api_key=cfg.api_key, model=served, engine=cfg.engine)
    if server.served_model != served:
        raise ServerError(f"the server at {base} serves {server.served_model!r}, not {served!r} as the run did: "
                          "resume against the server the run measured")
    if server.engine != was.engine:
        raise ServerError(f"the server at {base} is {server.engine}, the run measured {was.engine}: resume against "
                          "the server the run measured (or force the engine with --engine)")

    points, _ = plan_points(cfg.suite, was)  # the same points as the run planned: run.json's server decided them
    recorded = {o.name: o for o in info.points}
    unknown = sorted(set(recorded) - {p.name for p in points})
    if unknown:
        names = ", ".join(unknown[:3]) + (" ..." if len(unknown) > 3 else "")
        raise UsageError(f"run.json names points this cardgen does not plan for the run's suite ({names}): resume "
                         "it with the cardgen that started it")
    outcomes, to_run, rerun = [], [], []
    for point in points:
        outcome = recorded.get(point.name) or PointOutcome(name=point.name, kind=point.kind)
        if not outcome.ended:
            if outcome.started_unix is not None:  # cut off: run it again, its records so far superseded
                outcome = PointOutcome(name=point.name, kind=point.kind, attempt=outcome.attempt + 1)
                rerun.append(outcome)
            to_run.append(point)
        outcomes.append(outcome)
    done = len(points) - len(to_run)
    cfg, workers_choice = resolve_workers(cfg, to_run)
    templates, _ = size_prompts(base, headers, served, to_run)
    nonce = random.randrange(10_000)
    dataset_texts = sample_datasets(base, headers, served, to_run, max_model_len(server), nonce=nonce)

    before = info.status
    info = info.model_copy(deep=True)
    info.points = outcomes
    info.status, info.ended_unix, info.ended_at = RUNNING, None, None
    info.workers, info.workers_choice = int(cfg.workers), workers_choice
    if before == STALE:
        info.warnings.append(f"resumed a run on another host ({info.hostname}) that had not been heard of since "
                             f"{utc_text(info.heartbeat_unix or info.started_unix)}: its process was taken for dead")
    for path in (files.requests_jsonl, files.loadgen_jsonl, files.server_metrics_jsonl, files.gpu_metrics_jsonl):
        moved = set_torn_tail_aside(path)
        if moved:
            info.warnings.append(f"{path.name} ended in a line cut short ({moved} bytes, a write the crash "
                                 f"interrupted): moved to {path.name}.torn before appending")
    again = "; ".join(f"{o.name} runs again as attempt {o.attempt} (the cut-off attempt's records are kept, "
                      "superseded)" for o in rerun)
    info.warnings.append(f"resumed with cardgen resume at {utc_text(time.time())} after the run {status_words(before)}: "
                         f"{done} of {len(points)} points had ended and were not sent again"
                         + (f"; {again}" if again else ""))
    if max_model_len(server) != max_model_len(was):
        info.warnings.append(f"the server the run was resumed against serves a context of {max_model_len(server)} "
                             f"tokens, the one it started with {max_model_len(was)}")
    files.save_run_info(info)
    setup = Setup(model=served, engine=was.engine, headers=headers, templates=templates,
                  dataset_texts=dataset_texts, nonce=nonce)
    return Prepared(cfg=cfg, base_url=base, server=was, points=tuple(to_run), setup=setup,
                    info=info.model_copy(deep=True), attempts={o.name: o.attempt for o in outcomes}, resumed=True,
                    points_done=done)
