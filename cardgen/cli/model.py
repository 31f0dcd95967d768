"""A modelled card in virtual time: ``cardgen build MODEL`` with no server (one run per ``--gpu``), and
``cardgen resume`` of such a run. Never imports Locust."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from cardgen.buildconfig import BuildConfig, ResumeConfig
from cardgen.cli.price import price_for
from cardgen.cli.render import render_card, request_rows
from cardgen.numbers import duration_text
from cardgen.rundir import make_run_dir, run_dirs
from cardgen.runinfo import load_seconds
from cardgen.schemas.run import PriceDescription, RunInfo
from cardgen.sim import beside
from cardgen.sim.modelled import ModelledRun, ModelledServer, build_run, resume_modelled


def build_modelled(config: BuildConfig) -> None:
    """One modelled run per GPU of ``config``, each computed in virtual time, with its card."""
    servers = [ModelledServer.of_build(config, gpu=g) for g in config.target.gpus]
    for server in servers:
        server.check()
    prices = [price_for(config.price_per_hour, g) for g in config.target.gpus]
    out = config.outputs
    for server, run_dir, price in zip(servers, run_dirs(config.model, config.target.gpus, out_dir=out.out_dir,
                                                        runs_root=out.runs_root), prices, strict=True):
        model_in_virtual_time(server, config, run_dir, price=price)


def model_in_virtual_time(server: ModelledServer, config: BuildConfig, run_dir: Path, *,
                          price: PriceDescription | None = None) -> None:
    """The suite's run on ``server`` (one GPU of ``config``) computed in virtual time, its run directory and
    card."""
    quiet = config.outputs.quiet
    if not quiet:
        click.echo(f"cardgen: no --url: MODELLING {server.model} on {server.tp}x {server.gpu_name} ({server.engine} "
                   "profile) in virtual time. Every figure of this card is MODELLED, not measured.", err=True)
    make_run_dir(run_dir)
    began = time.time()
    # the card is rendered from the scrapes and the records as they were written, not from reading them back
    card = not config.outputs.no_card
    rows = request_rows() if card else None
    on_record = rows.add if rows is not None else None

    def run(**how: Any) -> ModelledRun:
        return build_run(server, config, run_dir, argv=sys.argv, started_unix=began, price=price, **how)

    if beside.usable():  # computed in a second process, its lines written and made the card's rows in this one
        info, scrapes = beside.compute_beside(lambda lines: run(lines=lines).info, run_dir, on_record=on_record,
                                              hold_scrapes=card)
    else:
        computed = run(hold_scrapes=card, on_record=on_record)
        info, scrapes = computed.info, computed.scrapes
    if not quiet:
        skipped = sum(1 for p in info.points if p.stop == "skipped")
        click.echo(f"cardgen: {len(info.points) - skipped} points, {info.requests_total} requests"
                   + (f" ({skipped} points skipped at saturation)" if skipped else "")
                   + f", computed in {time.time() - began:.1f} s; on a real server the suite would take "
                   f"~{duration_text(load_seconds(info) * server.tp)} of GPU time (modelled)", err=True)
    if rows is not None:
        render_card(run_dir, quiet=quiet, scrapes=scrapes, frame=rows.frame())
    click.echo(str(run_dir))


def resume_in_virtual_time(info: RunInfo, config: ResumeConfig) -> None:
    """Continue a run the virtual server computed in virtual time, on a virtual server started afresh (as it was
    built: ``--run-saturated`` is read back from run.json)."""
    run_dir = config.run_dir
    resume_modelled(run_dir, info, started_unix=time.time(), model_config=config.model_config_path)
    if not config.outputs.no_card:
        render_card(run_dir, quiet=config.outputs.quiet)
    click.echo(str(run_dir))
