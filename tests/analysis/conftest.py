from __future__ import annotations

import pytest
from simruns import SyntheticTruth, synthetic_run

from cardgen.analysis.analyse import Analysis, analyse


@pytest.fixture(scope="session")
def small_run() -> tuple[Analysis, SyntheticTruth]:
    """The default synthetic run (every scenario kind, vLLM metric names, cache config exposed), analysed."""
    data, truth = synthetic_run()
    return analyse(data), truth
