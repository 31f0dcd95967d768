"""``cardgen render RUN_DIR``: re-analyse a run directory's raw files and rebuild its card."""

from __future__ import annotations

from pathlib import Path

import click

from cardgen.errors import UsageError


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
def render(run_dir: Path, slo_ttft_s: float, slo_tpot_s: float, min_speed: float) -> None:
    """Rebuild summary.json, tables/, figures/ and README.md of RUN_DIR from its raw files."""
    from cardgen.card import RenderOptions, render_run

    path = render_run(run_dir, options=RenderOptions(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
                                                     min_speed_tok_s=min_speed))
    click.echo(str(path))
