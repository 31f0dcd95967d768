"""Fixtures for the site tests: one site built from the sample runs, shared by the tests that only read it (made
once for the whole test run: :mod:`once`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from once import made_once
from site_helpers import REPO, Built, make_runs

from cardgen.site import build_site
from cardgen.site.sample import isolated_config


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Built:
    return made_once("site", tmp_path_factory, worker_id, _build)


def _build(work: Path) -> Built:
    runs = make_runs(work / "runs")
    config = isolated_config(REPO / "mkdocs.yml", work)
    warnings: list[str] = []
    build = build_site(work / "runs", site_dir=work / "site", config_file=config, warn=warnings.append)
    return Built(build, runs, work / "site", build.docs_dir, config, warnings)
