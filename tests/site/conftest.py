"""Fixtures for the site tests: one site built from the sample runs, shared by the tests that only read it."""

from __future__ import annotations

import pytest
from site_helpers import REPO, Built, make_runs

from cardgen.site import build_site
from cardgen.site.sample import isolated_config


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("site")
    runs = make_runs(work / "runs")
    config = isolated_config(REPO / "mkdocs.yml", work)
    warnings: list[str] = []
    build = build_site(work / "runs", site_dir=work / "site", config_file=config, warn=warnings.append)
    return Built(build, runs, work / "site", build.docs_dir, config, warnings)
