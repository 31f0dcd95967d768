"""``cardgen resume RUN_DIR``: continue a run that was cut off (Ctrl-C, ``kill -9``, a lost connection, a server
that died), then render its card as ``build`` does.

The points that ended are not sent again; the one cut off runs again as its next attempt (its earlier records
stay, superseded); the others run as planned, appended to the same files. A run measured over HTTP continues
against the server the run measured: ``--url`` (or run.json's URL), an engine started again with ``--launch`` (or
as run.json says it was started), or the built-in virtual server started again with run.json's model, GPU and tp
(:mod:`cardgen.cli.measure`). A run modelled in virtual time continues in virtual time (:mod:`cardgen.cli.model`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cardgen.buildconfig import Outputs, ResumeConfig
from cardgen.cli.options import as_the_run_did, check_server_options, parse_load, server_options
from cardgen.errors import UsageError
from cardgen.runwriter import check_resumable
from cardgen.schemas.run import RunInfo


@click.command("resume")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--model-config", type=click.Path(path_type=Path),
              help="Virtual server: the Hugging Face config.json the run modelled, when run.json cannot name it.")
@server_options(workers_default=None)
@click.pass_context
def resume(ctx: click.Context, /, **params: Any) -> None:
    """Continue the run in RUN_DIR where it stopped, and write its card."""
    info = check_resumable(params["run_dir"])
    config = parse_resume(ctx, info)
    if info.clock == "virtual":
        from cardgen.cli.model import resume_in_virtual_time  # noqa: PLC0415  it imports ssl: after the path is chosen

        resume_in_virtual_time(info, config)
        return
    from cardgen.cli.measure import resume_measured  # noqa: PLC0415  Locust patches ssl: a load over HTTP imports it first

    resume_measured(info, config, api_key=params["api_key"])


def parse_resume(ctx: click.Context, info: RunInfo) -> ResumeConfig:
    """``resume``'s options as one :class:`ResumeConfig`, with how the run was built read back from ``info``
    (run.json): ``--run-saturated``, given now or when the run was built. A run over HTTP has its server
    options checked here, once (the URL as its base URL; ``--workers`` parsed, or the count the run had; the
    workers' place, master address and port, the scrape interval and the DCGM URL as the run had them unless given
    again). The API key is no part of it."""
    p = as_the_run_did(ctx.params, info.build.load if info.build is not None else None)
    url, workers = p["url"], None
    if info.clock == "virtual":
        if p["url"] or p["launch"]:
            raise UsageError(f"{p['run_dir']} was modelled in virtual time: resume it without --url or --launch")
    else:
        url, workers = check_server_options(url=url, launch=p["launch"], gpu_metrics_url=p["gpu_metrics_url"],
                                            workers=info.workers if p["workers"] is None else p["workers"],
                                            scrape_interval=p["scrape_interval"], remote_workers=p["remote_workers"])
    load = parse_load(p, workers=workers)
    return ResumeConfig(run_dir=p["run_dir"], url=url, launch=p["launch"], engine_args=p["engine_args"],
                        engine=p["engine"], model_config_path=p["model_config"],
                        load=load.model_copy(update={"run_saturated": load.run_saturated or info.ran_saturated()}),
                        outputs=Outputs(no_card=p["no_card"], quiet=p["quiet"]))
