"""``cardgen resume RUN_DIR``: continue a run that was cut off (Ctrl-C, ``kill -9``, a lost connection, a server
that died), then render its card as ``build`` does.

The points that ended are not sent again; the one cut off runs again as its next attempt (its earlier records
stay, superseded); the others run as planned, appended to the same files. The server is the one the run
measured: ``--url`` (or run.json's URL), an engine started again with ``--launch`` (or as run.json says it was
started), or, for a modelled run, the built-in virtual server started again with run.json's model, GPU and tp.
"""

from __future__ import annotations

import shlex
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import click

from cardgen.cli.build import (
    check_server_options,
    measured_server,
    plan_in_background,
    render_card,
    server_options,
)
from cardgen.errors import UsageError
from cardgen.schemas.run import RunInfo


@click.command("resume")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--model-config", type=click.Path(path_type=Path),
              help="Virtual server: the Hugging Face config.json the run modelled, when run.json cannot name it.")
@server_options(workers_default=None)
def resume(run_dir: Path, url: str | None, api_key: str | None, workers: str | None, remote_workers: bool,
           master_bind: str, master_port: int, engine: str | None, launch: str | None, engine_args: str,
           model_config: Path | None, gpu_metrics_url: str | None, scrape_interval: float, run_saturated: bool,
           no_card: bool, quiet: bool) -> None:
    """Continue the run in RUN_DIR where it stopped, and write its card."""
    from cardgen.load.stage import LoadConfig, execute, finish  # noqa: I001  (first: monkey-patches for gevent)
    from cardgen.load.resume import prepare_resume
    from cardgen.scenarios.resume import check_resumable, suite_of
    from cardgen.redact import MASK

    info = check_resumable(run_dir)
    if info.clock == "virtual":
        resume_in_virtual_time(run_dir, info, model_config=model_config, given=url or launch, no_card=no_card,
                               quiet=quiet)
        return
    count = check_server_options(url=url, launch=launch, gpu_metrics_url=gpu_metrics_url,
                                 workers=info.workers if workers is None else workers, scrape_interval=scrape_interval)
    virtual = None
    launched = info.server.launch or {}
    if not url and not launch:
        if info.modelled and info.sim is not None:
            from cardgen.sim.modelled import ModelledServer

            virtual = ModelledServer.of_run(info, model_config=model_config)
            virtual.check()
        elif launched.get("engine"):
            launch = str(launched["engine"])
            args = [str(a) for a in launched.get("engine_args") or ()]
            if any(MASK in a for a in args):
                raise UsageError(f"the run started {launch} with a secret among its arguments (not saved): give "
                                 f"--launch {launch} --engine-args '...' again")
            engine_args = shlex.join(args)
        else:
            url = info.server.url
    cfg = LoadConfig(url=url or "", model=info.model, suite=suite_of(info), run_dir=run_dir, api_key=api_key,
                     workers=count, remote_workers=remote_workers, master_bind_host=master_bind,
                     master_port=master_port, scrape_interval_s=scrape_interval, quiet=quiet, engine=engine,
                     gpu_metrics_url=gpu_metrics_url,
                     run_saturated=run_saturated or "--run-saturated" in info.command)  # as the run began
    planning = nullcontext() if virtual is None else plan_in_background(
        cfg.suite, model=virtual.model, gpu=virtual.gpu, tp=virtual.tp, model_config=virtual.model_config,
        modelled=True, gpu_given=True, done=[o.name for o in info.points if o.ended], engine=virtual.engine)
    with planning as plan, measured_server(replace(cfg, plan=plan), model=info.model, launch=launch,
                                           engine_args=engine_args, virtual=virtual) as cfg:
        prepared = prepare_resume(cfg, info)
        finish(prepared, execute(prepared))
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def resume_in_virtual_time(run_dir: Path, info: RunInfo, *, model_config: Path | None, given: str | None,
                           no_card: bool, quiet: bool) -> None:
    """Continue a run the virtual server computed in virtual time, on a virtual server started afresh."""
    import time

    from cardgen.sim.modelled import resume_modelled

    if given:
        raise UsageError(f"{run_dir} was modelled in virtual time: resume it without --url or --launch")
    resume_modelled(run_dir, info, started_unix=time.time(), model_config=model_config)
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))
