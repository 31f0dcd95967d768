"""cardgen.numbers: one way to write a figure, and a missing one, for the card, the site, its charts, diff and
the calibration report."""

from __future__ import annotations

import math

import pytest

from cardgen import numbers
from cardgen.card.templates import environment
from cardgen.diff.format import _interval
from cardgen.sim.calibration import calibration_markdown
from cardgen.site import charts
from cardgen.site.compare import Cell
from cardgen.site.pages import fmt_date, ratio_cell


def test_figures_have_three_significant_figures_and_counts_are_whole():
    assert [numbers.sig(v) for v in (8033.9, 52.72, 0.01234, 0, -1.5)] == ["8,030", "52.7", "0.0123", "0", "-1.50"]
    assert numbers.figure(13582.4, "tok/s") == "13,600" and numbers.figure(113200, "tokens") == "113,200"
    assert numbers.tok_s(41.94) == "41.9 tok/s" and numbers.ms(0.0447) == "44.7 ms" and numbers.pct(0.00565) == "0.565 %"
    assert numbers.ratio(1.04217) == "1.042" and numbers.ratio_interval(0.98, 1.1) == "0.980–1.100"
    assert numbers.interval(68.1, 68.7) == "68.1–68.7" and numbers.error_pct(7.6) == "±8 %"
    assert [numbers.tick(v) for v in (0, 2.5, 1500, 25000)] == ["0", "2.5", "1,500", "25k"]
    assert [numbers.file_size(n) for n in (512, 1234, 1_234_567)] == ["512 B", "1.2 kB", "1.2 MB"]


@pytest.mark.parametrize("missing", [None, math.nan, math.inf])
def test_a_missing_value_is_one_em_dash_everywhere(missing):
    for name in ("sig", "integer", "tok_s", "ms", "secs", "pct", "half_width", "tokens", "signed_pct", "signed_ms",
                 "signed_integer", "gib", "joules", "watts", "ratio", "figure", "error_pct"):
        assert getattr(numbers, name)(missing) == "—", name
    assert numbers.interval(missing, 1.0) == numbers.ratio_interval(1.0, missing) == "—"
    assert numbers.DASH == "—" != numbers.RANGE


def test_every_reader_writes_a_missing_value_the_same_way():
    card = environment().from_string("{{ x }} {{ y | ms }}").render(x=None, y=None)
    assert card == "— —"
    assert ratio_cell(None).endswith(">—</td>") and fmt_date(None) == "—"
    assert numbers.figure(Cell(None).value, Cell(None).unit) == "—"

    class NoInterval:
        ci_low = ci_high = None
        interval = "none"
    assert _interval(NoInterval()) == "—"  # type: ignore[arg-type]
    rows = [{"setup": "s", "figure": "f", "published": None, "predicted": 1234.5, "unit": "tok/s", "error_pct": None,
             "role": "fit", "source": "x", "note": "", "key": "k"}]
    assert "| — tok/s | 1,230 tok/s | — | fit |" in calibration_markdown(rows)


def test_a_figure_reads_the_same_on_the_card_the_site_and_in_diff():
    value = 13582.4
    card = environment().from_string("{{ x | sig }}").render(x=value)
    assert card == numbers.figure(value, "tok/s") == "13,600"
    svg = charts.chart_svg(charts.Chart("t", "x", "y", [charts.Series("s", [charts.Point(0, 0), charts.Point(25000, 1)],
                                                                      charts.color(0))]))
    assert ">25k<" in svg
