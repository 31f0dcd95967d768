"""The virtual server as a test fixture.

``sim`` is one server per test module (FixedPerf with exactly known step times, a stamp log, a high modelled
EOS rate so that forgetting ``ignore_eos`` shows). Start another with ``running_sim(sim_argv(...))``:

    with running_sim(sim_argv("--faults", "drop=3")) as other:
        other.url
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from simclient import sim_argv

from cardgen.sim.launch import SimHandle, running_sim


@pytest.fixture(scope="module")
def stamp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim") / "stamps.jsonl"


@pytest.fixture(scope="module")
def sim(stamp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    log = tmp_path_factory.mktemp("simlog") / "server.log"
    with running_sim(sim_argv("--stamp-log", str(stamp_path), "--eos-rate", "0.2"), log_path=log) as handle:
        yield handle
