"""The leaderboard's trade-off chart and cost column as built (no browser): every pair of axes drawn once, the
default one shown, each marker carrying its exact values for the CSV; an unpriced site says how to price a run;
a card's NOTE box list is a list on its page."""

from __future__ import annotations

import re

from cardgen.site.tradeoff import COST_COLUMN, X_AXES, Y_AXES


def test_every_pair_of_axes_is_drawn_and_the_default_shown(built_site):
    page = built_site.html("index.html")
    views = re.findall(r'<div class="cardgen-tradeoff-view" data-x="(\w+)" data-y="(\w+)"([^>]*)>', page)
    assert sorted((x, y) for x, y, _ in views) == sorted((x.key, y.key) for x in X_AXES for y in Y_AXES)
    assert [(x, y) for x, y, hidden in views if not hidden] == [("user", "tput")]
    assert 'class="cardgen-axis-x"' in page and 'class="cardgen-axis-y"' in page
    assert re.search(r'<circle [^>]*data-key="[^"]+" data-x="[0-9.e+-]+" data-y="[0-9.e+-]+" data-label="\d+"', page)
    assert 'data-series="A100-80GB (measured)"' in page
    # no sample run of the shared site is priced or measured its energy: those views say why they are empty
    assert "No run shown has a price: give one with cardgen build or cardgen render --price-per-hour P." in page
    assert "No run shown measured its GPUs" in page
    assert COST_COLUMN in page
    assert "assets/csv.js" in page


def test_a_cards_note_box_list_is_a_list_on_its_page(built_site):
    pages = built_site.all_html()
    notes = [h for rel, h in pages.items() if rel.startswith("runs/") and 'class="admonition note"' in h]
    assert notes
    for html in notes:
        box = html[html.index('class="admonition note"'):]
        box = box[:box.index("</div>")]
        assert "<ul>" in box and "<li>" in box and "\n- " not in box and ": - " not in box
