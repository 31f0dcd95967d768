"""The runs ``cardgen diff`` is tested on, made once per session (:mod:`diff_helpers`)."""

from __future__ import annotations

import pytest
from diff_helpers import DiffRuns, make_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> DiffRuns:
    return make_runs(tmp_path_factory.mktemp("diff"))
