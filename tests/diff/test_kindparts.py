"""How cardgen diff resamples each kind's points (``cardgen.diff.kindparts``): a closed loop's steady requests in
rounds of its users and its throughput with them, a batch by round, any other kind request by request with its
throughput the offered load's."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cardgen.diff.kindparts import kind_diff
from cardgen.schemas.summary import ScenarioSummary


def _summary(kind: str, **fields) -> ScenarioSummary:
    return ScenarioSummary.model_validate({"scenario": f"{kind}-x", "kind": kind, "prompt_tokens": 8,
                                           "output_tokens": 4, **fields})


def _rows(n: int, **columns) -> pd.DataFrame:
    return pd.DataFrame({"sent_at": np.arange(n, dtype=float), **columns})


def test_a_closed_loop_is_resampled_in_rounds_of_its_users_and_its_throughput_with_them():
    s = _summary("closed", parallel=4, steady_state=False)
    rows, labels = kind_diff(s).requests(_rows(8), s)
    assert list(labels) == [0, 0, 0, 0, 1, 1, 1, 1] and kind_diff(s).unit(s) == "rounds"
    assert kind_diff(s).throughput(s) == "too short for a steady state: no interval"
    assert kind_diff(_summary("closed", parallel=1)).unit(_summary("closed", parallel=1)) == "requests"


def test_a_batch_is_resampled_by_round_and_an_open_loop_request_by_request():
    batch = _summary("batch", parallel=2)
    _, labels = kind_diff(batch).requests(_rows(4, repeat=[0.0, 0.0, 1.0, 1.0]), batch)
    assert list(labels) == [0, 0, 1, 1] and kind_diff(batch).unit(batch) == "rounds"
    open_loop = _summary("open", rate_rps=2.0)
    _, labels = kind_diff(open_loop).requests(_rows(3), open_loop)
    assert list(labels) == [0, 1, 2] and kind_diff(open_loop).unit(open_loop) == "requests"
    assert "follows the offered load" in (kind_diff(open_loop).throughput(open_loop) or "")
