"""A run's price per GPU-hour, from the command line or the GPU file, written into its ``run.json`` (``price``),
where every later render finds it: ``cardgen build --price-per-hour P``, a GPU file's ``price_per_hour``, and
``cardgen render RUN_DIR --price-per-hour P``, which prices a run already made."""

from __future__ import annotations

import math
from pathlib import Path

import click

from cardgen.errors import UsageError
from cardgen.runwriter import RunWriter
from cardgen.schemas.run import PriceDescription
from cardgen.sim.hardware import is_gpu_file, load_gpu_file

PRICE_OPTION = click.option(
    "--price-per-hour", type=float, default=None,
    help="USD per GPU-hour: the card gives the cost per million tokens at every point and within the SLO "
         "(a GPU file's price_per_hour otherwise).")


def check_price(price_per_hour: float | None) -> float | None:
    """``--price-per-hour``: a finite number, not negative; else a one-line UsageError."""
    if price_per_hour is not None and (not math.isfinite(price_per_hour) or price_per_hour < 0):
        raise UsageError(f"--price-per-hour must be a number of US dollars, 0 or more, not {price_per_hour:g}")
    return price_per_hour


def price_for(price_per_hour: float | None, gpu: str | None, *, source: str = "--price-per-hour",
              ) -> PriceDescription | None:
    """The run's price: ``--price-per-hour`` when given, else the GPU file's ``price_per_hour`` (None: no price)."""
    if price_per_hour is not None:
        return PriceDescription(usd_per_gpu_hour=price_per_hour, source=source)
    if gpu and is_gpu_file(gpu):
        listed = load_gpu_file(Path(gpu)).price_per_hour
        if listed is not None:
            return PriceDescription(usd_per_gpu_hour=listed, source=f"price_per_hour of the GPU file {Path(gpu).name}")
    return None


def record_price(run_dir: Path, price: PriceDescription | None) -> None:
    """Write ``price`` into the run's ``run.json`` (nothing when None)."""
    if price is None:
        return
    writer = RunWriter.amend(run_dir)
    writer.info.price = price
    writer.save()
