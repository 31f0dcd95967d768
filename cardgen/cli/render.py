"""``cardgen render RUN_DIR``: re-analyse a run directory's raw files and rebuild its card."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cardgen.cli.price import PRICE_OPTION, check_price, price_for, record_price
from cardgen.errors import UsageError
from cardgen.rundir import RunDir
from cardgen.schemas.records import MetricSample

if TYPE_CHECKING:
    import pandas as pd

    from cardgen.analysis.requests import RequestFrame


def _positive(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not value > 0:
        raise UsageError(f"--{param.name.replace('_', '-')} must be greater than 0, not {value:g}")
    return value


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--slo-ttft-s", type=float, default=2.0, show_default=True, callback=_positive,
              help="Goodput SLO: time to first token at most this many seconds.")
@click.option("--slo-tpot-s", type=float, default=0.1, show_default=True, callback=_positive,
              help="Goodput SLO: time per output token at most this many seconds.")
@click.option("--min-speed", type=float, default=20.0, show_default=True, callback=_positive,
              help="Capacity threshold: the per-request speed (tokens/s) parallel requests must keep.")
@PRICE_OPTION
def render(run_dir: Path, slo_ttft_s: float, slo_tpot_s: float, min_speed: float, price_per_hour: float | None) -> None:
    """Rebuild summary.json, tables/, figures/ and README.md of RUN_DIR from its raw files; --price-per-hour
    prices the run (kept in its run.json for every later render)."""
    if check_price(price_per_hour) is not None:
        RunDir(run_dir).load_run_info()  # a one-line error for what is not a run directory, before writing to it
        record_price(run_dir, price_for(price_per_hour, None, source="cardgen render --price-per-hour"))

    from cardgen.card import RenderOptions, render_run  # noqa: PLC0415  the analysis and card load only to render

    path = render_run(run_dir, options=RenderOptions(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                                                     min_speed_tok_s=min_speed))
    click.echo(str(path))


def request_rows() -> RequestFrame:
    """Where a build makes its records its card's rows as it writes them (:func:`render_card`'s ``frame``)."""
    from cardgen.analysis.requests import RequestFrame  # noqa: PLC0415  pandas loads only for a card

    return RequestFrame()


def render_card(run_dir: Path, *, quiet: bool, scrapes: Sequence[MetricSample] | None = None,
                frame: pd.DataFrame | None = None) -> None:
    """The card of ``run_dir`` (``scrapes`` and ``frame``: its server_metrics.jsonl and its records' rows as the
    build that wrote them held them)."""
    from cardgen.card import render_run  # noqa: PLC0415  pandas and Jinja (0.8 s) after the load, or never (--no-card)

    card = render_run(run_dir, scrapes=scrapes, frame=frame)
    if not quiet:
        click.echo(f"cardgen: card written to {card}", err=True)
        click.echo(headline_text(run_dir), err=True)


def headline_text(run_dir: Path) -> str:
    """The three headline figures in one line, from summary.json ('-' where the run could not measure one)."""
    from cardgen.card.kindparts import kind_answers  # noqa: PLC0415  the card (Jinja) loads only once a card is rendered

    summary = RunDir(run_dir).load_summary()
    h = summary.headline

    def fmt(value: float | None, unit: str) -> str:
        return "-" if value is None else f"{value:,.0f} {unit}" if value >= 100 else f"{value:,.1f} {unit}"

    label = "MODELLED" if summary.modelled else "measured"
    return (f"cardgen: {label}: prompt ingestion {fmt(h.prompt_ingestion_tok_s, 'tok/s')}; generation "
            f"{fmt(h.generation_tok_s_at_10_parallel_1024_128, 'tok/s')} per request at 10 parallel (1024 in, "
            f"128 out); KV cache {fmt(h.kv_cache_tokens, 'tokens')}"
            + (f" ({summary.kv_cache_method})" if summary.kv_cache_method else "")
            + "".join(f"; {words}" for words in kind_answers(summary)))
