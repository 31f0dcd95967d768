"""Site build speed without changing a byte: pages rendered beforehand on every core are the pages MkDocs renders
itself, the fast inline pass changes nothing, and a rebuild touches only what changed."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import markdown
import pytest
from site_helpers import REPO, make_runs

from cardgen.site import build as site_build
from cardgen.site import build_site
from cardgen.site.build import _run_page, load_mkdocs_config
from cardgen.site.pagerender import MarkdownSetup, page_body, render_markdown, render_with_header
from cardgen.site.plan import plan_site
from cardgen.site.runs import gather_runs
from cardgen.site.sample import isolated_config, write_sample_run

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


def _html(site: Path) -> dict[str, str]:
    return {p.relative_to(site).as_posix(): p.read_text("utf-8") for p in site.rglob("*.html")}


def _mtimes(site: Path) -> dict[str, float]:
    return {p.relative_to(site).as_posix(): p.stat().st_mtime for p in site.rglob("*") if p.is_file()}


def _backdated(site: Path, docs: Path) -> dict[str, float]:
    """Every file of the site and of its page sources dated a minute back (their order kept, as MkDocs compares
    them), then the site's times: a file the next build writes is newer, instead of waiting for the clock to tick
    past the file system's granularity."""
    for p in [*site.rglob("*"), *docs.rglob("*")]:
        if p.is_file():
            st = p.stat()
            os.utime(p, ns=(st.st_atime_ns - 60 * 10**9, st.st_mtime_ns - 60 * 10**9))
    return _mtimes(site)


@pytest.fixture(scope="module")
def setup_and_plan(built_site):
    config = load_mkdocs_config(built_site.config, site_dir=built_site.site)
    runs = gather_runs(built_site.site.parent / "runs").runs
    return MarkdownSetup.from_config(config), plan_site(runs)


def test_a_run_page_rendered_in_parts_is_the_page_rendered_whole(setup_and_plan):
    """The card is converted once per process and the header and raw files are put around it: the same HTML
    and table of contents as converting the page's source in one go (hostile cards included)."""
    setup, plan = setup_and_plan
    assert len(plan.runs) == 4
    for run in plan.runs:
        parts, _ = _run_page(run, lambda _: None)
        whole = render_markdown(setup, page_body(parts.text()))
        split = render_with_header(setup, parts.card, parts.split, parts.header, parts.raw)
        assert split.html == whole.html, run.page_dir
        assert split.toc_tokens == whole.toc_tokens, run.page_dir
        again = render_with_header(setup, parts.card, parts.split, parts.header, parts.raw)  # from the cache
        assert again == split


def test_the_fast_inline_pass_changes_no_page(setup_and_plan, built_site):
    setup, _ = setup_and_plan
    assert "cardgen.site.fastinline" in setup.extensions
    slow = markdown.Markdown(extensions=[e for e in setup.extensions if e != "cardgen.site.fastinline"],
                             extension_configs=setup.configs)
    sources = list((built_site.docs).rglob("*.md"))
    tricky = "x  \nline | `a*b*` \\* [l](u) <b>t</b> &amp; _e_ **s** ![i](p.png) <http://x> a_b_c 2*3*4\n"
    for text in [page_body(p.read_text("utf-8")) for p in sources] + [tricky]:
        assert render_markdown(setup, text).html == slow.reset().convert(text)


def test_pages_rendered_beforehand_are_the_pages_mkdocs_renders(built_site, tmp_path, monkeypatch):
    """The same site built by MkDocs alone (every page converted inside it, the runs' files in the docs dir as
    MkDocs needs them to check the cards' links): byte for byte the same HTML."""
    work = tmp_path / "plain"
    config = isolated_config(REPO / "mkdocs.yml", work)
    write_docs = site_build.write_docs

    def plain(plan, docs_dir, *, warn, setup=None, site_dir=None):  # no page rendered beforehand
        docs = write_docs(plan, docs_dir, warn=warn, setup=None, site_dir=site_dir)
        site_build.link_assets(docs.assets, docs_dir)
        return docs

    monkeypatch.setattr(site_build, "write_docs", plain)
    monkeypatch.setattr("cardgen.site.pagerender.is_entity_page", lambda _: False)
    build_site(built_site.site.parent / "runs", site_dir=work / "site", config_file=config, warn=lambda _: None)
    assert _html(work / "site") == _html(built_site.site)


def test_a_rebuild_touches_only_what_changed(tmp_path):
    root = tmp_path / "runs"
    make_runs(root)
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    site = tmp_path / "site"
    first = build_site(root, site_dir=site, config_file=config)
    assert not first.incremental and first.pages_rendered == first.pages_total
    before, html = _backdated(site, first.docs_dir), _html(site)
    again = build_site(root, site_dir=site, config_file=config)
    assert again.incremental and again.pages_rendered == 5  # the top pages (the search index covers them)
    assert _html(site) == html
    rewritten = {k for k, v in _mtimes(site).items() if v != before.get(k)}
    assert rewritten <= {"index.html", "methodology.html", "models/index.html", "gpus/index.html",
                         "compare/index.html", "404.html", "sitemap.xml", "sitemap.xml.gz",
                         "search/search_index.json", ".cardgen-site.json"}

    # one new run of a model measured before: its page, its model's, GPU's and Compare pages, and the top ones
    new = write_sample_run(root, gpu="L40S", speed=1.3, started=dt.datetime(2026, 11, 24, tzinfo=dt.UTC))
    before = _backdated(site, first.docs_dir)
    third = build_site(root, site_dir=site, config_file=config)
    assert third.incremental and third.pages_rendered == 5 + 4
    rewritten = {k for k, v in _mtimes(site).items() if v != before.get(k) and k.endswith(".html")}
    entity = sorted(k for k in rewritten if k.count("/") >= 2)
    assert [k.split("/")[0] for k in entity] == ["compare", "gpus", "models", "runs"]
    page = next(k for k in entity if k.startswith("runs/"))
    assert (site / page).parent.joinpath("figures", "total_throughput.png").samefile(
        new / "figures" / "total_throughput.png")  # the run's own file, linked
    fresh = tmp_path / "fresh"
    build_site(root, site_dir=fresh, config_file=config)
    assert _html(site) == _html(fresh)  # the same site as a build from nothing

    # a run taken away: its pages and files go too
    shutil.rmtree(new)
    build_site(root, site_dir=site, config_file=config)
    assert not (site / page).exists() and not (site / page).parent.exists()
    assert "L40S" not in (site / "index.html").read_text("utf-8")


def test_another_config_means_a_build_from_nothing(tmp_path):
    root = tmp_path / "runs"
    write_sample_run(root)
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    site = tmp_path / "site"
    build_site(root, site_dir=site, config_file=config)
    assert build_site(root, site_dir=site, config_file=config).incremental
    config.write_text(config.read_text("utf-8").replace("cardgen reports", "other reports"), "utf-8")
    full = build_site(root, site_dir=site, config_file=config)
    assert not full.incremental and full.pages_rendered == full.pages_total
    assert "other reports" in (site / "runs").rglob("index.html").__next__().read_text("utf-8")
