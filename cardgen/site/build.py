"""``cardgen site``: gather runs, write pages into the MkDocs docs dir (``site_src/``), build with MkDocs
Material in strict mode.

Stages compose as in MkDocs itself: :func:`~cardgen.site.runs.gather_runs` reads everything,
:func:`write_docs` writes the pages, :func:`run_mkdocs` builds them, :func:`link_assets` puts each run's files
next to its page; :func:`build_site` does all of them.

**Rebuilding touches only what changed.** A page is written only when its text changed, and a site built before
by the same cardgen, config and assets (``.cardgen-site.json`` in the site dir says so) is rebuilt with MkDocs'
``dirty`` mode: only the pages whose source changed are rendered again (the top pages, which the search index
covers, always are). A run's figures, tables and raw files are hard links to the run's own files (copies where
links cannot be made), never copied through the docs dir. Anything else gets a full build.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cardgen import __version__
from cardgen.diff import saved_sample
from cardgen.errors import CardgenError, UsageError
from cardgen.rundir import FIGURES_DIR, REQUESTS_JSONL, RUN_JSON, SUMMARY_JSON, TABLES_DIR, RunDir
from cardgen.site import charts, compare, pages
from cardgen.site.config import choose_config, put_assets
from cardgen.site.mdtext import alerts_to_admonitions, localize_links, split_front_matter
from cardgen.site.pagerender import (
    ENTITY_DIRS,
    MarkdownSetup,
    PageRenderPlugin,
    Rendered,
    page_body,
    parallel_map,
    render_markdown,
    render_with_header,
)
from cardgen.site.plan import Group, PlannedRun, SitePlan, href, plan_site
from cardgen.site.runs import gather_runs

Warn = Callable[[str], None]

# What `cardgen site` writes into the docs dir (and deletes before writing); everything else there is kept.
GENERATED = ("index.md", "methodology.md", "runs", "models", "gpus", "compare")
RAW_FILES = (SUMMARY_JSON, REQUESTS_JSONL, RUN_JSON)  # offered for download when present
COPIED_DIRS = (FIGURES_DIR, TABLES_DIR)
STAMP = ".cardgen-site.json"  # in the site dir: what built it, so that the next build may be incremental
_DIRTY_WARNING = "A 'dirty' build is being performed"


def _ignore(_: str) -> None:
    pass


@dataclass(frozen=True)
class SiteBuild:
    site_dir: Path
    docs_dir: Path
    runs: int
    skipped: int
    seconds: float
    incremental: bool = False  # only the pages whose source changed were rendered
    pages_rendered: int = 0  # pages MkDocs laid out this time
    pages_total: int = 0
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage, in order


def build_site(
    runs_root: Path,
    *,
    site_dir: Path = Path("site"),
    config_file: Path | None = None,
    warn: Warn = _ignore,
) -> SiteBuild:
    """Build the site from every run under ``runs_root``; broken runs are skipped with a ``warn`` line. The MkDocs
    config is ``config_file``, else ``./mkdocs.yml``, else cardgen's own (:mod:`cardgen.site.config`).

    Raises :class:`~cardgen.errors.UsageError` when there is no run (or no config), and
    :class:`~cardgen.errors.CardgenError` when MkDocs fails (its warnings go to ``warn`` first).
    """
    start = last = time.perf_counter()
    stages: dict[str, float] = {}

    def done(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[stage], last = now - last, now

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
    chosen = choose_config(config_file)
    if chosen.docs_dir is not None:
        put_assets(chosen.file, chosen.docs_dir)
    config = load_mkdocs_config(chosen.file, site_dir=site_dir, docs_dir=chosen.docs_dir)
    docs_dir = Path(config["docs_dir"])
    stamp = _stamp(chosen.file, docs_dir)
    incremental = _previous_stamp(site_dir) == stamp
    (site_dir / STAMP).unlink(missing_ok=True)  # a build that fails half-way leaves no claim to be reused
    done("gather")
    setup = MarkdownSetup.from_config(config)
    docs = write_docs(plan_site(gathered.runs), docs_dir, warn=warn, setup=setup,
                      site_dir=site_dir if incremental else None)
    done("write and render pages")
    built = run_mkdocs(config, warn=warn, dirty=incremental, rendered=(setup, docs.rendered))
    done("mkdocs")
    link_assets(docs.assets, site_dir, incremental=incremental)
    if incremental:
        _remove_stale(site_dir, docs_dir, docs.assets)
    _write_stamp(site_dir, stamp)
    done("run files")
    return SiteBuild(
        site_dir=site_dir,
        docs_dir=docs_dir,
        runs=len(gathered.runs),
        skipped=len(gathered.skipped),
        seconds=time.perf_counter() - start,
        incremental=incremental,
        pages_rendered=built,
        pages_total=docs.pages,
        stages=stages,
    )


def _stamp(config_file: Path, docs_dir: Path) -> dict[str, str]:
    """What a built site depends on besides its pages: cardgen, MkDocs and the theme, the config, the assets."""
    digest = hashlib.sha256(Path(config_file).read_bytes())
    assets = docs_dir / "assets"
    for path in sorted(assets.rglob("*")) if assets.is_dir() else []:
        if path.is_file():
            digest.update(path.relative_to(assets).as_posix().encode() + b"\0" + path.read_bytes())
    return {"cardgen": __version__, "mkdocs": version("mkdocs"), "mkdocs-material": version("mkdocs-material"),
            "config_and_assets": digest.hexdigest()}


def _previous_stamp(site_dir: Path) -> dict[str, str] | None:
    try:
        data = json.loads((site_dir / STAMP).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and (site_dir / "index.html").is_file() else None


def _write_stamp(site_dir: Path, stamp: dict[str, str]) -> None:
    (site_dir / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", "utf-8")


def _output(site_dir: Path, docs_dir: Path, page: Path) -> Path:
    """The HTML MkDocs makes of a page source (``use_directory_urls: false``)."""
    return site_dir / page.relative_to(docs_dir).with_suffix(".html")


def _modified(source: Path, output: Path) -> bool:
    """MkDocs' own test for a dirty build: the source is newer than its output (or there is none)."""
    return not output.is_file() or source.stat().st_mtime > output.stat().st_mtime


def _check_out_dir(site_dir: Path) -> None:
    """MkDocs empties its site dir: refuse a non-empty directory that is not a built site."""
    if site_dir.is_dir() and any(site_dir.iterdir()) and not (site_dir / "index.html").is_file():
        raise UsageError(
            f"refusing to build into {site_dir}: it is not empty and holds no built site "
            "(MkDocs would delete its contents); pass an empty or new --out"
        )


# --- writing the docs dir ---------------------------------------------------------------------------------


Assets = dict[str, Path]  # site-relative path of a run's file -> the file in the run directory


@dataclass(frozen=True)
class Docs:
    """What :func:`write_docs` did: the runs' files to put next to their pages (:func:`link_assets`), the entity
    pages it rendered (by :meth:`MarkdownSetup.key` of their Markdown), how many pages the site has."""

    assets: Assets
    rendered: dict[str, Rendered]
    pages: int


@dataclass(frozen=True)
class _Job:
    page: str  # run | model | gpu | compare
    index: int  # into the plan's runs, models, gpus or compared models


@dataclass(frozen=True)
class _Done:
    rel: str  # the page source, docs-relative
    assets: Assets
    rendered: tuple[str, Rendered] | None
    problems: list[str]


@dataclass(frozen=True)
class _Context:
    plan: SitePlan
    docs_dir: Path
    setup: MarkdownSetup | None  # render the pages too
    site_dir: Path | None  # an incremental build: render only what changed since this site was built


_CONTEXT: list[_Context] = []  # set before the worker processes fork (they read it, nothing is pickled)


def write_docs(plan: SitePlan, docs_dir: Path, *, warn: Warn = _ignore, setup: MarkdownSetup | None = None,
               site_dir: Path | None = None) -> Docs:
    """Make the generated part of ``docs_dir`` the pages of ``plan``: a page is written only when its text
    changed (so its time stamp says whether it changed), the top pages always (the search index covers them),
    and a generated file no page needs any more is removed. With ``setup``, the run, model, GPU and comparison
    pages are also rendered to HTML, every one (``site_dir`` None) or those newer than their page in the built
    ``site_dir``; the pages are made on every core (:func:`~cardgen.site.pagerender.parallel_map`)."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    written: set[Path] = set()

    def write(rel: str, text: str) -> None:
        written.add(docs_dir / rel)
        _write(docs_dir / rel, text, always=True)

    write("index.md", pages.home_page(plan))
    write("methodology.md", pages.methodology_page(
        resources.files("cardgen.site").joinpath("methodology.md").read_text("utf-8"), _calibration(warn)))
    write("models/index.md", pages.index_page(
        "Models", plan.models, here="models", other="GPUs", intro="Every model with at least one run."))
    write("gpus/index.md", pages.index_page(
        "GPUs", plan.gpus, here="gpus", other="Models", intro="Every GPU with at least one run."))
    write("compare/index.md", pages.compare_index(plan))
    jobs = [_Job("run", i) for i in range(len(plan.runs))] + [_Job("model", i) for i in range(len(plan.models))]
    jobs += [_Job("gpu", i) for i in range(len(plan.gpus))] + [_Job("compare", i) for i in range(len(plan.compared))]
    _CONTEXT[:] = [_Context(plan, docs_dir, setup, site_dir)]
    try:
        done = parallel_map(_entity_page, jobs)
    finally:
        _CONTEXT.clear()
    assets: Assets = {}
    rendered: dict[str, Rendered] = {}
    for d in done:
        written.add(docs_dir / d.rel)
        assets.update(d.assets)
        if d.rendered is not None:
            rendered[d.rendered[0]] = d.rendered[1]
        for problem in d.problems:
            warn(problem)
    _remove_unwritten(docs_dir, written)
    return Docs(assets, rendered, len(written))


def _entity_page(job: _Job) -> _Done:
    """One run's, model's, GPU's or comparison's page: written when it changed, rendered when it must be."""
    ctx = _CONTEXT[0]
    plan, problems = ctx.plan, list[str]()
    assets: Assets = {}
    parts = None
    if job.page == "run":
        run = plan.runs[job.index]
        rel = f"{run.page_dir}/index.md"
        parts, files = _run_page(run, problems.append)
        text = parts.text()
        assets = {f"{run.page_dir}/{f}": run.run.run_dir / f for f in files}
    elif job.page == "model":
        group = plan.models[job.index]
        rel = f"{group.page_dir}/index.md"
        text = pages.group_page(group, what="model", chart_html=_curves(group.runs, group.page_dir))
    elif job.page == "gpu":
        group = plan.gpus[job.index]
        rel, text = f"{group.page_dir}/index.md", pages.group_page(group, what="gpu")
    else:
        group = plan.compared[job.index]
        rel, text = f"{group.runs[0].compare_dir}/index.md", _compare_page(group)
    source = ctx.docs_dir / rel
    changed = _write(source, text)
    out = None
    if ctx.setup is not None and (ctx.site_dir is None or changed
                                  or _modified(source, _output(ctx.site_dir, ctx.docs_dir, source))):
        body = page_body(text)
        out = (ctx.setup.key(body), render_markdown(ctx.setup, body) if parts is None else
               render_with_header(ctx.setup, parts.card, parts.split, parts.header, parts.raw))
    return _Done(rel, assets, out, problems)


def _remove_unwritten(docs_dir: Path, written: set[Path]) -> None:
    for name in GENERATED:
        path = docs_dir / name
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            if path not in written:
                path.unlink()
        elif path.is_dir():
            for sub in sorted(path.rglob("*"), reverse=True):  # files before their directories
                if sub.is_symlink() or sub.is_file():
                    if sub not in written:
                        sub.unlink()
                elif sub.is_dir() and not any(sub.iterdir()):
                    sub.rmdir()


def _write(path: Path, text: str, *, always: bool = False) -> bool:
    """Write ``text`` unless the file already holds it (``always``: write anyway); whether it wrote."""
    if not always and path.is_file() and not path.is_symlink():
        try:
            if path.read_text("utf-8") == text:
                return False
        except (OSError, UnicodeDecodeError):
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text, "utf-8")
    return True


def _run_page(run: PlannedRun, warn: Warn) -> tuple[pages.RunPage, list[str]]:
    """A run's page and the files of its run directory that go next to it (run-relative)."""
    src = run.run.run_dir
    _, body = split_front_matter(run.run.card)
    card = localize_links(alerts_to_admonitions(body), src)
    for problem in card.problems:
        warn(problem)
    wanted = set(card.files).union(*(RunDir(src).files(sub) for sub in COPIED_DIRS))
    raw = [name for name in RAW_FILES if (src / name).is_file()]
    raw += sorted(p for p in wanted if p.startswith(f"{TABLES_DIR}/"))
    sizes = [(rel, (src / rel).stat().st_size) for rel in raw]
    return pages.run_page(run, card.markdown, sizes), sorted(wanted | set(raw))


def link_assets(assets: Assets, site_dir: Path, *, incremental: bool = False) -> None:
    """Put each run's files next to its page in the built site: a hard link to the run's own file (a copy where
    the file system cannot link). An incremental build leaves a link that still points at the file alone."""
    for rel, src in assets.items():
        dst = site_dir / rel
        if incremental and dst.is_file():
            try:
                if os.path.samefile(src, dst):
                    continue
            except OSError:
                pass
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() or dst.is_symlink():
            dst.unlink()
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)


def _remove_stale(site_dir: Path, docs_dir: Path, assets: Assets) -> None:
    """After an incremental build: the built files of pages and runs that are gone."""
    keep = {site_dir / rel for rel in assets}
    keep |= {_output(site_dir, docs_dir, p) for p in docs_dir.rglob("*.md")}
    for name in ENTITY_DIRS:
        root = site_dir / name
        for path in sorted(root.rglob("*"), reverse=True) if root.is_dir() else []:
            if path.is_file() and path not in keep:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def _curves(runs: list[PlannedRun], here: str, *, numbered: bool = False) -> list[str]:
    """The runs' throughput-against-interactivity curves overlaid, as inline SVG charts."""
    curves = [compare.run_curves(r.run.summary, href=href(here, r.page_dir),
                                 label=pages.run_label(i, r) if numbered else pages.run_name(r))
              for i, r in enumerate(runs)]
    return [charts.chart_svg(c) for c in compare.interactivity_charts(curves)]


def _compare_page(group: Group) -> str:
    runs = group.compare_runs
    samples = [saved_sample(r.run.run_dir, r.run.summary) for r in runs]
    tables = [compare.headline_table(samples), *compare.scenario_tables(samples)]
    here = group.runs[0].compare_dir or "compare"
    return pages.compare_page(group, [t for t in tables if t.rows], _curves(runs, here, numbered=True))


# the virtual server's calibration table, generated with ``python -m cardgen.sim.calibration`` and shipped (a test
# keeps it current): read as a file, not imported, since importing the simulator costs seconds of every build
CALIBRATION_TABLE = ("cardgen.sim", "data/calibration.md")


def _calibration(warn: Warn) -> str | None:
    """The virtual server's calibration table for the methodology page; None, said in one line, where it cannot be
    read (a broken install)."""
    package, path = CALIBRATION_TABLE
    try:
        return resources.files(package).joinpath(path).read_text("utf-8")
    except (OSError, ImportError) as exc:
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


def load_mkdocs_config(config_file: Path, *, site_dir: Path, docs_dir: Path | None = None) -> Any:
    """The MkDocs config from ``config_file`` with ``site_dir`` and strict mode (and ``docs_dir`` in place of the
    file's own, when given); a bad config is one line."""
    config_file = Path(config_file)
    if not config_file.is_file():
        raise UsageError(
            f"no MkDocs config at {config_file}: pass an existing file to --config, or leave it out to use "
            "./mkdocs.yml or else cardgen's own"
        )
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    from mkdocs.config import load_config  # noqa: PLC0415  MkDocs is heavy: loaded when a site is built
    from mkdocs.exceptions import MkDocsException  # noqa: PLC0415  MkDocs is heavy (as above)

    with _MkDocsLog() as log:
        try:
            return load_config(
                config_file=str(config_file), site_dir=str(Path(site_dir).resolve()), strict=True,
                docs_dir=None if docs_dir is None else str(Path(docs_dir).resolve()),
            )
        except MkDocsException as exc:
            detail = log.lines[0] if log.lines else str(exc)
            raise UsageError(f"MkDocs config {config_file} is not usable: {detail}") from None


def run_mkdocs(config: Any, *, warn: Warn = _ignore, dirty: bool = False,
               rendered: tuple[MarkdownSetup, dict[str, Any]] | None = None) -> int:
    """Build the site; any MkDocs warning fails the build (strict), each reported through ``warn``. ``dirty``:
    only the pages whose source is newer than their output are rendered (MkDocs' own ``dirty`` build; its
    warning that such a build is for development is expected here, every other warning fails it as strict
    mode would). ``rendered``: the entity pages' HTML made beforehand (:mod:`cardgen.site.pagerender`). Returns
    how many pages were laid out."""
    from mkdocs.commands.build import build  # noqa: PLC0415  MkDocs is heavy: loaded when a site is built
    from mkdocs.exceptions import MkDocsException  # noqa: PLC0415  MkDocs is heavy (as above)

    setup, done = rendered if rendered is not None else (MarkdownSetup.from_config(config), {})
    plugin = PageRenderPlugin(setup, done)
    config.plugins["cardgen-pages"] = plugin
    strict = config.strict
    config.strict = strict and not dirty
    counter = _PageCounter()
    config.plugins["cardgen-count"] = counter
    with _MkDocsLog() as log:
        config.plugins.on_startup(command="build", dirty=dirty)
        try:
            build(config, dirty=dirty)
            problems = [line for line in log.lines if not line.startswith(_DIRTY_WARNING)]
            if strict and problems:
                raise MkDocsException(problems[0])
        except MkDocsException as exc:
            problems = [line for line in log.lines if not line.startswith(_DIRTY_WARNING)]
            for line in problems:
                warn(f"mkdocs: {line}")
            first = problems[0] if problems else exc.format_message()
            more = f" (and {len(problems) - 1} more warnings)" if len(problems) > 1 else ""
            raise CardgenError(f"the site did not build: {first}{more}") from None
        finally:
            config.plugins.on_shutdown()
            config.strict = strict
    return counter.pages


class _PageCounter:
    """Counts the pages MkDocs lays out (a dirty build skips the others)."""

    def __init__(self) -> None:
        self.pages = 0

    def on_post_page(self, output: str, *, page: Any, config: Any) -> str:
        self.pages += 1
        return output
