"""``cardgen diff RUN_A RUN_B``: every figure both runs have, B / A with its significance, a verdict per headline.

Exit status 0; 3 with ``--fail-on-regression`` when a headline is significantly worse by more than the threshold
(for CI pipelines that gate an engine upgrade)."""

from __future__ import annotations

from pathlib import Path

import click

from cardgen.diff import diff_runs, format_diff, format_json
from cardgen.errors import UsageError

REGRESSION_EXIT = 3


def _threshold(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not 0 <= value < 1:
        raise UsageError(f"--threshold must be a fraction in [0, 1), such as 0.05 for 5 %, not {value:g}")
    return value


@click.command("diff")
@click.argument("run_a", type=click.Path(path_type=Path, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (headlines, points).")
@click.option("--threshold", type=float, default=0.05, show_default=True, callback=_threshold,
              help="A regression: a headline significantly worse by more than this fraction.")
@click.option("--fail-on-regression", is_flag=True, help=f"Exit {REGRESSION_EXIT} when there is a regression.")
@click.option("--only-shared", is_flag=True,
              help="Compare the points both runs measured even when their suites or points differ.")
def diff(run_a: Path, run_b: Path, as_json: bool, threshold: float, fail_on_regression: bool,
         only_shared: bool) -> None:
    """Compare RUN_B with RUN_A: A, B, B / A and its 95 % interval for every shared figure."""

    result = diff_runs(run_a, run_b, threshold=threshold, only_shared=only_shared)
    click.echo(format_json(result) if as_json else format_diff(result), nl=False)
    if fail_on_regression and result.regressions:
        click.get_current_context().exit(REGRESSION_EXIT)
