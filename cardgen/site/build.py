"""``cardgen site``: gather runs, write pages into the MkDocs docs dir (``site_src/``), build with MkDocs
Material in strict mode.

Stages compose as in MkDocs itself: :func:`~cardgen.site.runs.gather_runs` reads everything,
:func:`write_docs` writes the pages, :func:`run_mkdocs` builds them; :func:`build_site` does all three.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from cardgen.diff import saved_sample
from cardgen.errors import CardgenError, UsageError
from cardgen.rundir import FIGURES_DIR, REQUESTS_JSONL, RUN_JSON, SUMMARY_JSON, TABLES_DIR, RunDir
from cardgen.site import charts, compare, pages
from cardgen.site.mdtext import alerts_to_admonitions, localize_links, split_front_matter
from cardgen.site.plan import Group, PlannedRun, SitePlan, href, plan_site
from cardgen.site.runs import gather_runs

Warn = Callable[[str], None]

# What `cardgen site` writes into the docs dir (and deletes before writing); everything else there is kept.
GENERATED = ("index.md", "methodology.md", "runs", "models", "gpus", "compare")
RAW_FILES = (SUMMARY_JSON, REQUESTS_JSONL, RUN_JSON)  # offered for download when present
COPIED_DIRS = (FIGURES_DIR, TABLES_DIR)


def _ignore(_: str) -> None:
    pass


@dataclass(frozen=True)
class SiteBuild:
    site_dir: Path
    docs_dir: Path
    runs: int
    skipped: int
    seconds: float


def build_site(
    runs_root: Path,
    *,
    site_dir: Path = Path("site"),
    config_file: Path = Path("mkdocs.yml"),
    warn: Warn = _ignore,
) -> SiteBuild:
    """Build the site from every run under ``runs_root``; broken runs are skipped with a ``warn`` line.

    Raises :class:`~cardgen.errors.UsageError` when there is no run (or no config), and
    :class:`~cardgen.errors.CardgenError` when MkDocs fails (its warnings go to ``warn`` first).
    """
    start = time.perf_counter()
    runs_root, site_dir = Path(runs_root), Path(site_dir)
    if not runs_root.is_dir():
        raise UsageError(f"no runs directory at {runs_root}: measure one with 'cardgen build MODEL' first")
    gathered = gather_runs(runs_root)
    for line in gathered.skipped:
        warn(line)
    if not gathered.runs:
        raise UsageError(
            f"no runs under {runs_root} (a run is a directory with summary.json and README.md):"
            " measure one with 'cardgen build MODEL' first"
        )
    _check_out_dir(site_dir)
    config = load_mkdocs_config(config_file, site_dir=site_dir)
    docs_dir = Path(config["docs_dir"])
    write_docs(plan_site(gathered.runs), docs_dir, warn=warn)
    run_mkdocs(config, warn=warn)
    return SiteBuild(
        site_dir=site_dir,
        docs_dir=docs_dir,
        runs=len(gathered.runs),
        skipped=len(gathered.skipped),
        seconds=time.perf_counter() - start,
    )


def _check_out_dir(site_dir: Path) -> None:
    """MkDocs empties its site dir: refuse a non-empty directory that is not a built site."""
    if site_dir.is_dir() and any(site_dir.iterdir()) and not (site_dir / "index.html").is_file():
        raise UsageError(
            f"refusing to build into {site_dir}: it is not empty and holds no built site "
            "(MkDocs would delete its contents); pass an empty or new --out"
        )


# --- writing the docs dir ---------------------------------------------------------------------------------


def write_docs(plan: SitePlan, docs_dir: Path, *, warn: Warn = _ignore) -> None:
    """Replace the generated part of ``docs_dir`` with the pages of ``plan``."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    for name in GENERATED:
        path = docs_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    _write(docs_dir / "index.md", pages.home_page(plan))
    _write(
        docs_dir / "methodology.md",
        pages.methodology_page(
            resources.files("cardgen.site").joinpath("methodology.md").read_text("utf-8"), _calibration(warn)
        ),
    )
    for run in plan.runs:
        _write_run(run, docs_dir, warn)
    for group in plan.models:
        _write(docs_dir / group.page_dir / "index.md",
               pages.group_page(group, what="model", chart_html=_curves(group.runs, group.page_dir)))
    for group in plan.gpus:
        _write(docs_dir / group.page_dir / "index.md", pages.group_page(group, what="gpu"))
    _write(
        docs_dir / "models" / "index.md",
        pages.index_page(
            "Models", plan.models, here="models", other="GPUs", intro="Every model with at least one run."
        ),
    )
    _write(
        docs_dir / "gpus" / "index.md",
        pages.index_page(
            "GPUs", plan.gpus, here="gpus", other="Models", intro="Every GPU with at least one run."
        ),
    )
    _write(docs_dir / "compare" / "index.md", pages.compare_index(plan))
    for group in plan.compared:
        _write_compare(group, docs_dir)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _write_run(run: PlannedRun, docs_dir: Path, warn: Warn) -> None:
    src, dst = run.run.run_dir, docs_dir / run.page_dir
    _, body = split_front_matter(run.run.card)
    card = localize_links(alerts_to_admonitions(body), src)
    for problem in card.problems:
        warn(problem)
    wanted = set(card.files).union(*(RunDir(src).files(sub) for sub in COPIED_DIRS))
    raw = [name for name in RAW_FILES if (src / name).is_file()]
    raw += sorted(p for p in wanted if p.startswith(f"{TABLES_DIR}/"))
    for rel in sorted(wanted | set(raw)):
        _copy(src / rel, dst / rel)
    sizes = [(rel, (src / rel).stat().st_size) for rel in raw]
    _write(dst / "index.md", pages.run_page(run, card.markdown, sizes))


def _curves(runs: list[PlannedRun], here: str, *, numbered: bool = False) -> list[str]:
    """The runs' throughput-against-interactivity curves overlaid, as inline SVG charts."""
    curves = [compare.run_curves(r.run.summary, href=href(here, r.page_dir),
                                 label=pages.run_label(i, r) if numbered else pages.run_name(r))
              for i, r in enumerate(runs)]
    return [charts.chart_svg(c) for c in compare.interactivity_charts(curves)]


def _write_compare(group: Group, docs_dir: Path) -> None:
    runs = group.compare_runs
    samples = [saved_sample(r.run.run_dir, r.run.summary) for r in runs]
    tables = [compare.headline_table(samples), *compare.scenario_tables(samples)]
    here = group.runs[0].compare_dir or "compare"
    page = pages.compare_page(group, [t for t in tables if t.rows], _curves(runs, here, numbered=True))
    _write(docs_dir / here / "index.md", page)


def _calibration(warn: Warn) -> str | None:
    """``cardgen.sim.calibration.calibration_markdown()`` when that module exists; None otherwise."""
    try:
        module = importlib.import_module("cardgen.sim.calibration")
    except ModuleNotFoundError as exc:
        if exc.name in ("cardgen.sim.calibration", "cardgen.sim"):
            return None
        warn(f"virtual server calibration left out of the methodology: {exc}")
        return None
    except ImportError as exc:
        warn(f"virtual server calibration left out of the methodology: {exc}")
        return None
    make = getattr(module, "calibration_markdown", None)
    if make is None:
        return None
    try:
        return str(make())
    except Exception as exc:  # noqa: BLE001 - another stage's failure must not stop the site
        warn(f"virtual server calibration left out of the methodology: {type(exc).__name__}: {exc}")
        return None


# --- MkDocs -----------------------------------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(" ".join(record.getMessage().split()))


class _MkDocsLog:
    """Collect MkDocs' warnings instead of letting them reach the root logger."""

    def __enter__(self) -> _Collect:
        self.logger = logging.getLogger("mkdocs")
        self.handler = _Collect()
        self.propagate = self.logger.propagate
        self.logger.addHandler(self.handler)
        self.logger.propagate = False
        return self.handler

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = self.propagate


def load_mkdocs_config(config_file: Path, *, site_dir: Path) -> Any:
    """The MkDocs config from ``config_file`` with ``site_dir`` and strict mode; a bad config is one line."""
    config_file = Path(config_file)
    if not config_file.is_file():
        raise UsageError(
            f"no MkDocs config at {config_file}: run 'cardgen site' from the cardgen checkout or "
            "pass --config"
        )
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    with _MkDocsLog() as log:
        try:
            return load_config(
                config_file=str(config_file), site_dir=str(Path(site_dir).resolve()), strict=True
            )
        except MkDocsException as exc:
            detail = log.lines[0] if log.lines else str(exc)
            raise UsageError(f"MkDocs config {config_file} is not usable: {detail}") from None


def run_mkdocs(config: Any, *, warn: Warn = _ignore) -> None:
    """Build the site; any MkDocs warning fails the build (strict), each reported through ``warn``."""
    from mkdocs.commands.build import build
    from mkdocs.exceptions import MkDocsException

    with _MkDocsLog() as log:
        config.plugins.on_startup(command="build", dirty=False)
        try:
            build(config)
        except MkDocsException as exc:
            for line in log.lines:
                warn(f"mkdocs: {line}")
            first = log.lines[0] if log.lines else exc.format_message()
            more = f" (and {len(log.lines) - 1} more warnings)" if len(log.lines) > 1 else ""
            raise CardgenError(f"the site did not build: {first}{more}") from None
        finally:
            config.plugins.on_shutdown()
