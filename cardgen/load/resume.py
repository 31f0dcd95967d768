# ruff: noqa: I001  (cardgen.load.stage first: it imports Locust, which monkey-patches the standard library)
"""Resuming a measured run (:func:`prepare_resume`): the server is probed again and must be the one the run
measured; what runs is :func:`cardgen.scenarios.resume.resume_plan`'s, and the run's
:class:`~cardgen.runwriter.RunWriter` continues its files. The load stage's :func:`~cardgen.load.stage.execute`
and :func:`~cardgen.load.stage.finish` then run it as any other, appending to the same files."""

from __future__ import annotations

from cardgen.load.stage import (
    LoadConfig,
    Prepared,
    max_model_len,
    plan_points,
    id_style,
    prompt_book,
    resolve_workers,
    sample_datasets,
    size_prompts,
)  # first: monkey-patches for gevent

import random
import time
from dataclasses import replace


from cardgen.engines import probe
from cardgen.errors import ServerError
from cardgen.load.messages import Setup
from cardgen.runwriter import RunWriter, plan_resume
from cardgen.schemas.run import RequestDialect, RunInfo


def prepare_resume(cfg: LoadConfig, info: RunInfo) -> Prepared:
    """Continue the run in ``cfg.plan.run_dir`` whose run.json is ``info`` (from :func:`check_resumable`)
    against the server at the plan's URL: the same points as the run planned (the plan's, expanded from
    run.json's suite), less those that ended (:func:`has_ended`); the point that was cut off runs again as its
    next attempt, points never reached as they were. The model, GPU and virtual server are the run's, whatever
    the plan says. run.json says ``running`` again, signed by this process, with a warning that says what was
    resumed (:meth:`RunWriter.resume`)."""
    plan = replace(cfg.plan, model=info.model, modelled=info.modelled,
                   sim=info.sim.model_dump(by_alias=True) if info.sim is not None else None,
                   gpu=info.gpu.model_dump(exclude_unset=True))
    cfg = replace(cfg, plan=plan)
    base = plan.url
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    was = info.server
    served = was.served_model or info.model
    server = probe(base, api_key=cfg.api_key, model=served, engine=plan.engine)
    if server.served_model != served:
        raise ServerError(f"the server at {base} serves {server.served_model!r}, not {served!r} as the run did: "
                          "resume against the server the run measured")
    if server.engine != was.engine:
        raise ServerError(f"the server at {base} is {server.engine}, the run measured {was.engine}: resume against "
                          "the server the run measured (or force the engine with --engine)")

    points, _, _ = plan_points(plan, was)  # the same points as the run planned: run.json's server decided them
    resumed = plan_resume(info, points)
    workers, workers_choice = resolve_workers(plan, resumed.to_run)
    book = prompt_book(base, headers, served)
    templates = size_prompts(book, resumed.to_run)
    nonce = random.randrange(10_000)
    to_run, dataset_texts = sample_datasets(book, resumed.to_run, max_model_len(server), nonce=nonce)

    context = [] if max_model_len(server) == max_model_len(was) else [
        f"the server the run was resumed against serves a context of {max_model_len(server)} tokens, the one it "
        f"started with {max_model_len(was)}"]
    info = info.model_copy(update={"workers": workers, "workers_choice": workers_choice})
    writer = RunWriter.resume(plan.run_dir, info, resumed, when=time.time(), warnings=context)
    dialect = was.dialect or RequestDialect()  # the fields the run's requests carried from its start
    setup = Setup(model=served, engine=was.engine, headers=headers, templates=templates,
                  dataset_texts=dataset_texts, nonce=nonce, length_fields=dialect.length_fields,
                  cold_fields=dialect.cold_fields, id_style=id_style(book, to_run))
    return Prepared(cfg=cfg, base_url=base, server=was, points=tuple(to_run), workers=workers, setup=setup,
                    writer=writer, attempts=resumed.attempts, resumed=True, points_done=resumed.done)
