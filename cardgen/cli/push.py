"""``cardgen push``: a card to a Hugging Face model repo, a raw run to a dataset repo."""

from __future__ import annotations

from pathlib import Path

import click

from cardgen.errors import UsageError
from cardgen.hub import card_plan, dataset_plan, format_plan, push_plan
from cardgen.hub.plan import check_repo_id
from cardgen.rundir import RunDir


@click.command(name="push")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--repo",
    "repo_id",
    metavar="ORG/MODEL",
    help="Model repo that receives the card, its figures and tables (in a subfolder).",
)
@click.option("--path-in-repo", metavar="DIR", help="Subfolder for the card  [default: perf/<gpu-slug>]")
@click.option("--no-pr", is_flag=True, help="Commit to main instead of opening a pull request.")
@click.option("--dry-run", is_flag=True, help="List what would be uploaded; send nothing.")
@click.option(
    "--allow-modelled",
    is_flag=True,
    help="Push figures from the virtual server (summary.json modelled: true); refused otherwise.",
)
@click.option(
    "--dataset",
    "dataset_id",
    metavar="ORG/NAME",
    help="Dataset repo that receives the raw run directory under runs/<model-slug>/<stamp>/ "
    "(read back by 'cardgen site --from-hub').",
)
def push(
    run_dir: Path,
    repo_id: str | None,
    path_in_repo: str | None,
    no_pr: bool,
    dry_run: bool,
    allow_modelled: bool,
    dataset_id: str | None,
) -> None:
    """Push a run's card to a model repo (a pull request by default) and/or the run to a dataset repo.

    The token comes from HF_TOKEN or the stored login ('hf auth login'); HF_ENDPOINT selects another Hub.
    """

    if not repo_id and not dataset_id:
        raise UsageError(
            "nothing to push: pass --repo ORG/MODEL (the card) and/or --dataset ORG/NAME (the run)"
        )
    if path_in_repo is not None and not repo_id:
        raise UsageError("--path-in-repo places the card: it needs --repo")
    rd = RunDir(run_dir)
    card = rd.load_card()  # a RunFileError names the file that is missing or unreadable
    summary = rd.load_summary()
    if summary.modelled and not allow_modelled:
        raise UsageError(
            f"refusing to push {run_dir}: its figures are modelled by cardgen's virtual server, not "
            "measured on a GPU; pass --allow-modelled to publish them labelled as modelled"
        )
    plans = []
    if repo_id:
        plans.append(
            card_plan(
                run_dir,
                summary,
                card,
                repo_id=check_repo_id(repo_id, flag="--repo"),
                path_in_repo=path_in_repo,
                create_pr=not no_pr,
            )
        )
    if dataset_id:
        plans.append(
            dataset_plan(
                run_dir, summary, repo_id=check_repo_id(dataset_id, flag="--dataset"), create_pr=not no_pr
            )
        )
    for plan in plans:
        for warning in plan.warnings:
            click.echo(f"cardgen: warning: {warning}", err=True)
        click.echo(format_plan(plan, dry_run=dry_run))
    if dry_run:
        click.echo("Dry run: nothing was sent.")
        return

    for plan in plans:
        url = push_plan(plan)
        click.echo(f"{'Opened pull request' if plan.create_pr else 'Committed'}: {url}")
