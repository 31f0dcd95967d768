"""The report site: every run's card, a leaderboard, per-model and per-GPU pages, comparisons and the
methodology, built with MkDocs Material from ``mkdocs.yml`` (docs dir ``site_src/``): the project's, else
cardgen's own (config.py: the package carries the checkout's, so an installed cardgen builds from any directory).

    gather_runs (runs.py) → plan_site (plan.py) → write_docs (build.py: pages.py, compare.py + charts.py; the
    run, model, GPU and comparison pages rendered on every core by pagerender.py) → run_mkdocs → link_assets
    (build.py) → serve.py

A site built before is rebuilt incrementally: only the pages whose text changed (see :mod:`cardgen.site.build`).

Pages are made safe by :mod:`cardgen.site.sanitize` (a Markdown extension enabled in ``mkdocs.yml``).
"""

from __future__ import annotations

from cardgen.site.build import GENERATED, SiteBuild, build_site
from cardgen.site.runs import SiteRun, gather_runs

__all__ = ["GENERATED", "SiteBuild", "SiteRun", "build_site", "gather_runs"]
