"""The SLO search's figure, through the data it plots: each target's percentile against load with its interval,
the threshold, each probe's verdict, the bracket and the crossing."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from cardgen.kinds.slosearch.analysis import SloPercentile, SloProbe, SloSearches, SloSearchResult
from cardgen.kinds.slosearch.figures import FIGURES, draw_slo, slo_plot
from cardgen.schemas.summary import Summary


def _cell(target: str, value: float, low: float | None, high: float | None, threshold: float) -> SloPercentile:
    metric = target.split("_")[0]
    return SloPercentile(target=target, metric=metric, percentile=99, threshold_s=threshold, value_s=value,
                         ci_low_s=low, ci_high_s=high)


def _result() -> SloSearchResult:
    probes = []
    for number, (load, met, tpot) in enumerate([(4.0, True, 0.044), (8.0, False, 0.1), (5.0, None, 0.051)]):
        probes.append(SloProbe(probe=number, load=load, met=met, percentiles=[
            _cell("ttft_p99_s", tpot * 10, tpot * 9, tpot * 11, 1.0),
            _cell("tpot_p99_s", tpot, tpot * 0.9, None if met is False else tpot * 1.1, 0.05)]))
    return SloSearchResult(scenario="slo-rate", load="rate", unit="req/s", slo_text="TPOT p99 ≤ 50 ms", low=4.0,
                           high=8.0, crossing=4.9, probes=probes)


def test_each_target_against_load_sorted_with_its_interval_and_verdicts():
    plot = slo_plot(_result())
    assert [c.label for c in plot.curves] == ["TTFT p99", "TPOT p99"]
    tpot = plot.curves[1]
    assert tpot.load.tolist() == [4.0, 5.0, 8.0] and tpot.value_s.tolist() == [0.044, 0.051, 0.1]
    assert tpot.verdicts == ("met", "could not tell", "missed")
    assert math.isnan(tpot.high_s[2]) and tpot.threshold_s == 0.05  # no upper bound where it missed
    assert np.all(tpot.low_s <= tpot.value_s)
    assert (plot.low, plot.high, plot.crossing) == (4.0, 8.0, 4.9)


def test_it_draws_one_panel_per_target():
    fig = Figure()
    axes = fig.subplots(2, 1, sharex=True)
    draw_slo(list(axes), slo_plot(_result()))
    assert axes[1].get_ylabel() == "TPOT p99 (ms)" and axes[0].get_xscale() == "log"
    assert any(line.get_ydata()[0] == 50 for line in axes[1].get_lines())  # the threshold, in ms
    assert slo_plot(SloSearchResult(scenario="x", load="rate", unit="req/s")) is None


def test_a_figure_per_search_with_probes_named_by_its_point():
    built = FIGURES.build(SloSearches(searches=[_result(), SloSearchResult(scenario="x", load="rate", unit="req/s")]),
                          Summary(model="m"))
    assert list(built) == ["slo_slo-rate.png"]
    fig = built["slo_slo-rate.png"]()
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "slo-rate: highest rate within TPOT p99 ≤ 50 ms"
