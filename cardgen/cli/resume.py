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

import click

from cardgen.cli.options import server_options
from cardgen.runwriter import check_resumable


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
    info = check_resumable(run_dir)
    if info.clock == "virtual":
        from cardgen.cli.model import resume_in_virtual_time  # noqa: PLC0415  it imports ssl: after the path is chosen

        resume_in_virtual_time(run_dir, info, model_config=model_config, given=url or launch, no_card=no_card,
                               quiet=quiet)
        return
    from cardgen.cli.measure import resume_measured  # noqa: PLC0415  Locust patches ssl: a load over HTTP imports it first

    resume_measured(run_dir, info, url=url, api_key=api_key, workers=workers, remote_workers=remote_workers,
                    master_bind=master_bind, master_port=master_port, engine=engine, launch=launch,
                    engine_args=engine_args, model_config=model_config, gpu_metrics_url=gpu_metrics_url,
                    scrape_interval=scrape_interval, run_saturated=run_saturated, no_card=no_card, quiet=quiet)
