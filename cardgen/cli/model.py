"""A modelled card in virtual time: ``cardgen build MODEL`` with no server (one run per ``--gpu``), and
``cardgen resume`` of such a run. Never imports Locust."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from cardgen.cli.price import price_for, record_price
from cardgen.cli.render import render_card
from cardgen.errors import UsageError
from cardgen.numbers import duration_text
from cardgen.rundir import make_run_dir, run_dirs
from cardgen.runinfo import load_seconds
from cardgen.schemas.run import PriceDescription, RunInfo
from cardgen.sim.modelled import ModelledServer, modelled_run, resume_modelled
from cardgen.sim.served import ServedModel
from cardgen.suite import Suite


def build_modelled(model: str, *, suite: Suite, gpus: Sequence[str], out_dir: Path | None, runs_root: Path,
                   engine: str | None, model_config: Path | None, tp: int, run_saturated: bool, no_card: bool,
                   quiet: bool, served: ServedModel | None = None, price_per_hour: float | None = None) -> None:
    """One modelled run per GPU, each computed in virtual time, with its card."""
    servers = [ModelledServer(model=model, gpu=g, tp=tp, model_config=model_config, engine=engine or "vllm",
                              served=served or ServedModel()) for g in gpus]
    for server in servers:
        server.check()
    prices = [price_for(price_per_hour, g) for g in gpus]
    for server, run_dir, price in zip(servers, run_dirs(model, gpus, out_dir=out_dir, runs_root=runs_root), prices,
                                      strict=True):
        model_in_virtual_time(server, suite, run_dir, run_saturated=run_saturated, no_card=no_card, quiet=quiet,
                              price=price)


def model_in_virtual_time(server: ModelledServer, suite: Suite, run_dir: Path, *, run_saturated: bool,
                          no_card: bool, quiet: bool, price: PriceDescription | None = None) -> None:
    """The suite's run on ``server`` computed in virtual time, its run directory and card."""
    if not quiet:
        click.echo(f"cardgen: no --url: MODELLING {server.model} on {server.tp}x {server.gpu_name} ({server.engine} "
                   "profile) in virtual time. Every figure of this card is MODELLED, not measured.", err=True)
    make_run_dir(run_dir)
    began = time.time()
    info = modelled_run(server, suite, run_dir, argv=sys.argv, started_unix=began, run_saturated=run_saturated)
    if not quiet:
        skipped = sum(1 for p in info.points if p.stop == "skipped")
        click.echo(f"cardgen: {len(info.points) - skipped} points, {info.requests_total} requests"
                   + (f" ({skipped} points skipped at saturation)" if skipped else "")
                   + f", computed in {time.time() - began:.1f} s; on a real server the suite would take "
                   f"~{duration_text(load_seconds(info) * server.tp)} of GPU time (modelled)", err=True)
    record_price(run_dir, price)
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))


def resume_in_virtual_time(run_dir: Path, info: RunInfo, *, model_config: Path | None, given: str | None,
                           no_card: bool, quiet: bool) -> None:
    """Continue a run the virtual server computed in virtual time, on a virtual server started afresh."""
    if given:
        raise UsageError(f"{run_dir} was modelled in virtual time: resume it without --url or --launch")
    resume_modelled(run_dir, info, started_unix=time.time(), model_config=model_config)
    if not no_card:
        render_card(run_dir, quiet=quiet)
    click.echo(str(run_dir))
