"""The closed loop's figures, tested through the data they plot."""

from __future__ import annotations

import numpy as np
import pytest
from simruns import synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.kinds.closed.figures import pair_panels, total_throughput


@pytest.fixture(scope="module")
def analysis():
    return analyse(synthetic_run()[0])


def by_name(analysis):
    return {s.scenario: s for s in analysis.summary.scenarios}


def test_total_throughput_one_line_per_pair(analysis):
    lines = total_throughput(analysis.summary.scenarios)
    assert [line.label for line in lines] == ["128 in / 32 out", "1024 in / 128 out"]
    s = by_name(analysis)
    long = lines[1]
    assert long.x.tolist() == [1, 4, 10]
    assert long.y.tolist() == [s[f"closed-in1024-out128-p{p}"].output_tok_s for p in (1, 4, 10)]
    assert np.all(np.diff(long.y) > 0)  # more parallel requests, more total throughput


def test_pair_panels_median_and_band(analysis):
    panels = {p.pair: p for p in pair_panels(analysis.summary.scenarios)}
    p = panels[(1024, 128)]
    s = by_name(analysis)["closed-in1024-out128-p10"]
    assert p.speed.y[-1] == s.speed_from_start_tok_s.p50
    assert p.speed.low[-1] == s.speed_from_start_tok_s.p25 and p.speed.high[-1] == s.speed_from_start_tok_s.p75
    assert p.ttft.y[-1] == s.ttft_s.p50
    assert p.kv_usage_pct[-1] == pytest.approx(100 * s.kv_usage_max)
    assert np.all(p.speed.low <= p.speed.y) and np.all(p.speed.y <= p.speed.high)
    assert np.all(np.diff(p.speed.y) < 0)  # per-request speed falls as parallelism grows


def test_no_closed_points_no_lines(analysis):
    only_open = [s for s in analysis.summary.scenarios if s.kind == "open"]
    assert total_throughput(only_open) == [] and pair_panels(only_open) == []
