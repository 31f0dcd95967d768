"""``cardgen site``: build the static report site from every run (and optionally serve it)."""

from __future__ import annotations

from pathlib import Path

import click

from cardgen.hub import downloaded_runs
from cardgen.hub.plan import check_repo_id
from cardgen.site import build_site
from cardgen.site.serve import make_server


def _warn(line: str) -> None:
    click.echo(f"cardgen: warning: {line}", err=True)


@click.command(name="site")
@click.option(
    "--runs",
    "runs_root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("runs"),
    show_default=True,
    help="Folder searched (at any depth) for run directories.",
)
@click.option(
    "--out",
    "site_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("site"),
    show_default=True,
    help="Where the built site goes (emptied first).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="MkDocs config; its docs_dir receives the generated pages.  [default: ./mkdocs.yml when there is one, "
    "else cardgen's own, with ./site_src/ as docs_dir]",
)
@click.option(
    "--from-hub",
    "from_hub",
    metavar="ORG/NAME",
    help="Build from the runs in this Hugging Face dataset repo (pushed with 'cardgen push --dataset') "
    "instead of --runs.",
)
@click.option("--serve", is_flag=True, help="Then serve the site on 127.0.0.1 until Ctrl-C.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port for --serve (0: any free port).",
)
def site(
    runs_root: Path, site_dir: Path, config_file: Path | None, from_hub: str | None, serve: bool, port: int
) -> None:
    """Build the report site: a leaderboard, a page per run, model, GPU and comparison, the methodology."""

    if from_hub:

        with downloaded_runs(check_repo_id(from_hub, flag="--from-hub")) as hub_runs:
            result = build_site(hub_runs, site_dir=site_dir, config_file=config_file, warn=_warn)
    else:
        result = build_site(runs_root, site_dir=site_dir, config_file=config_file, warn=_warn)
    skipped = f" ({result.skipped} skipped)" if result.skipped else ""
    pages = (f"{result.pages_rendered} of {result.pages_total} pages rebuilt" if result.incremental
             else f"{result.pages_total} pages")
    click.echo(
        f"Built {result.site_dir}/ from {result.runs} runs{skipped} in {result.seconds:.1f} s ({pages}); "
        f"open {result.site_dir / 'index.html'}"
    )
    if serve:

        server = make_server(site_dir, port=port)
        click.echo(f"Serving {site_dir}/ at {server.url} (Ctrl-C stops)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            click.echo("Stopped.")
        finally:
            server.server_close()
