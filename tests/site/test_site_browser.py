"""The built site in headless Debian Chromium through a local HTTP server: the leaderboard sorts and filters, its
chart follows the filters, the view lives in the address (a link opens it again), every image loads, the curves
are drawn, the console stays clean, no server text runs as script; screenshots are saved (copied to
``$CARDGEN_SCREENSHOTS`` when set).

Needs /usr/bin/chromium and websocket-client. Skipped without them on a developer machine; with CI=true a
missing browser is a failure, never a skip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from site_helpers import serving

pytestmark = pytest.mark.browser

ROWS = "Array.from(document.querySelectorAll('.cardgen-board tbody tr'))"
MARKERS = (  # the headline chart's (the trade-off chart below it has markers of its own)
    "Array.from(document.querySelectorAll('.cardgen-board > .cardgen-chart circle[data-key]'))"
    ".filter(c => c.parentNode.style.display !== 'none').length"
)
IMAGES = (
    "Array.from(document.images).map(i => ({src: i.getAttribute('src'), "
    "ok: i.complete && i.naturalWidth > 0}))"
)


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    missing = [
        what
        for what, ok in (
            ("/usr/bin/chromium (apt-get install -y chromium)", path),
            ("websocket-client", importlib.util.find_spec("websocket")),
        )
        if not ok
    ]
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser test cannot run in CI without {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)}")
    return str(path)


@pytest.fixture
def served(built_site):
    with serving(built_site.site) as url:
        yield url


def _column(browser, index: int) -> list[str]:
    return browser.eval(f"{ROWS}.filter(r => !r.hidden).map(r => r.cells[{index}].textContent.trim())")


def test_site_in_chromium(built_site, served, tmp_path):
    from chromium_cdp import Chromium

    binary = _chromium()
    pages = built_site.all_html()
    run_page = next(r for r in sorted(pages) if r.startswith("runs/codellama"))
    evil_page = next(r for r, h in pages.items() if r.startswith("runs/") and "alert(2)" in h)
    compare_page = next(r for r in sorted(pages) if r.startswith("compare/codellama"))
    model_page = next(r for r in sorted(pages) if r.startswith("models/codellama"))

    with Chromium(binary, tmp_path / "profile") as browser:
        browser.goto(served + "index.html")
        assert browser.eval("document.title").startswith("Leaderboard")
        before = _column(browser, 0)
        assert len(before) == 4

        browser.click(".cardgen-board thead th:nth-child(1) button")  # Model
        after = _column(browser, 0)
        assert after != before and after == sorted(after, key=str.lower)
        assert (
            browser.eval("document.querySelector('.cardgen-board thead th').getAttribute('aria-sort')")
            == "ascending"
        )

        browser.click(".cardgen-board thead th:nth-child(5) button")  # prompt ingestion: ascending
        browser.click(".cardgen-board thead th:nth-child(5) button")  # then descending
        speeds = [float(v.replace(",", "")) for v in _column(browser, 4)]
        assert speeds == sorted(speeds, reverse=True)

        browser.eval(
            "(() => { const i = document.querySelector('.cardgen-filter'); i.value = 'h100';"
            " i.dispatchEvent(new Event('input')); })()"
        )
        assert _column(browser, 1) == ["H100"]
        assert browser.eval("document.querySelector('.cardgen-count').textContent") == "1 of 4 runs"
        assert browser.eval(MARKERS) == 1  # the chart shows the rows that pass
        # the view is in the address: sort and filter, as a link someone can open
        view = browser.eval("location.hash")
        assert "q=h100" in view and "sort=5" in view and "dir=desc" in view
        browser.goto(served + "methodology.html")
        browser.goto(served + "index.html#q=&kind=modelled&sort=1&dir=asc")  # a shared link, opened afresh
        assert browser.eval("document.querySelector('.cardgen-kind').value") == "modelled"
        assert _column(browser, 3) == ["modelled", "modelled"] and browser.eval(MARKERS) == 2
        assert browser.eval("document.querySelector('.cardgen-board thead th').getAttribute('aria-sort')") == "ascending"
        browser.eval("location.hash = 'gpu=h100'")  # another view on the same page
        browser.eval("new Promise(r => setTimeout(r, 100))")
        assert _column(browser, 1) == ["H100"] and browser.eval("document.querySelector('.cardgen-gpu').value") == "h100"
        browser.goto(served + "index.html")
        assert len(_column(browser, 0)) == 4 and browser.eval(MARKERS) == 4
        shot = browser.screenshot(tmp_path / "leaderboard.png", full_page=True)
        assert shot.read_bytes().startswith(b"\x89PNG")

        for rel in ("index.html", run_page, compare_page, model_page, evil_page, "methodology.html"):
            browser.goto(served + rel)
            images = browser.eval(IMAGES)
            assert all(img["ok"] for img in images), (rel, images)
            if rel == run_page:
                assert len([i for i in images if "favicon" not in (i["src"] or "")]) >= 2, rel
            if rel in (compare_page, model_page):  # the curves, drawn inline
                assert browser.eval("document.querySelectorAll('.cardgen-chart svg polyline').length") >= 2, rel
        browser.goto(served + compare_page)
        assert browser.eval("document.querySelectorAll('td.cardgen-better').length") >= 1
        browser.screenshot(tmp_path / "compare.png", full_page=True)
        browser.goto(served + model_page)
        browser.screenshot(tmp_path / "model.png", full_page=True)

        assert browser.errors() == []
        shots = [tmp_path / n for n in ("leaderboard.png", "compare.png", "model.png")]
        keep = os.environ.get("CARDGEN_SCREENSHOTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for shot in shots:
                shutil.copyfile(shot, Path(keep) / shot.name)
        print("screenshots:", *shots)
