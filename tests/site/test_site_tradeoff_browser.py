"""The leaderboard's cost column and trade-off chart, the CSV of every table and chart, and a card's NOTE box list,
in headless Debian Chromium through a local HTTP server: the axes switch, the choice and the filters live in the
address (a link opens the same view), the CSV holds what the page shows, and the note lists what the run lacks
as a list. Built from three sample runs: two priced (one of them with GPU energy measured), one not."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from pathlib import Path

import pytest
from site_helpers import REPO, serving
from test_site_browser import _chromium

from cardgen.card.render import render_run
from cardgen.rundir import GPU_METRICS_JSONL, REQUESTS_JSONL
from cardgen.schemas.run import PriceDescription
from cardgen.site import build_site
from cardgen.site.sample import SAMPLE_PAIRS, isolated_config, write_sample_run

pytestmark = pytest.mark.browser

PAIRS = len(SAMPLE_PAIRS)
VISIBLE_VIEW = "document.querySelector('.cardgen-tradeoff-view:not([hidden])')"


def _price(run: Path, usd: float) -> None:
    info_path = run / "run.json"
    info = json.loads(info_path.read_text("utf-8"))
    info["price"] = PriceDescription(usd_per_gpu_hour=usd, source="--price-per-hour").model_dump()
    info_path.write_text(json.dumps(info), "utf-8")


def _energy(run: Path, watts: float) -> None:
    """A gpu_metrics.jsonl as NVML writes it: one GPU at ``watts``, a sample every 0.25 s over the run."""
    sent = [json.loads(line) for line in (run / REQUESTS_JSONL).read_text("utf-8").splitlines() if line]
    start, end = min(r["sent_at"] for r in sent) - 1, max(r["end_at"] for r in sent) + 1
    lines, t = [], start
    while t <= end:
        lines.append(json.dumps({"t": t, "gpu": 0, "source": "nvml", "util_pct": 80.0, "power_w": watts,
                                 "mem_used_bytes": 2**34, "mem_total_bytes": 2**36,
                                 "energy_mj": watts * (t - start) * 1000}))
        t += 0.25
    (run / GPU_METRICS_JSONL).write_text("\n".join(lines) + "\n", "utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("tradeoff")
    runs = work / "runs"
    a100 = write_sample_run(runs, gpu="A100-80GB", speed=1.0, requests=6)
    h100 = write_sample_run(runs, gpu="H100", speed=1.8, requests=6, started=dt.datetime(2026, 11, 22, tzinfo=dt.UTC))
    write_sample_run(runs, gpu="L4", speed=0.4, requests=6, modelled=True,
                     started=dt.datetime(2026, 11, 23, tzinfo=dt.UTC))  # no price
    _price(a100, 1.2)
    _price(h100, 2.5)
    _energy(h100, 400.0)
    for run in (a100, h100):
        render_run(run)
    config = isolated_config(REPO / "mkdocs.yml", work)
    build_site(runs, site_dir=work / "site", config_file=config)
    return work / "site"


@pytest.fixture
def served(site):
    with serving(site) as url:
        yield url


def _csv(browser, selector: str) -> str:
    """Click the CSV link ``selector`` and read the file it offers."""
    browser.click(selector)
    href = browser.eval(f"document.querySelector({json.dumps(selector)}).href")
    assert href.startswith("data:text/csv;charset=utf-8,")
    return urllib.parse.unquote(href.split(",", 1)[1])


def _set(browser, selector: str, value: str) -> None:
    browser.eval(f"(() => {{ const s = document.querySelector({json.dumps(selector)}); s.value = {json.dumps(value)};"
                 " s.dispatchEvent(new Event('change')); })()")


def test_cost_column_switchable_chart_csv_and_note_lists(site, served, tmp_path):
    from chromium_cdp import Chromium

    binary = _chromium()
    with Chromium(binary, tmp_path / "profile") as browser:
        browser.goto(served + "index.html")
        heads = browser.eval("Array.from(document.querySelectorAll('.cardgen-board thead th')).map(t => t.textContent)")
        cost = next(i for i, h in enumerate(heads) if h.startswith("$ / M tokens"))
        by_gpu = dict(browser.eval(f"Array.from(document.querySelectorAll('.cardgen-board tbody tr')).map(r => "
                                   f"[r.cells[1].textContent, r.cells[{cost}].textContent])"))
        assert by_gpu["L4"] == "—" and by_gpu["A100-80GB"].startswith("$") and by_gpu["H100"].startswith("$")

        # the default axes: output tokens/s per GPU against tokens/s per user, a line per run and pair
        assert browser.eval(f"{VISIBLE_VIEW}.dataset.y + '/' + {VISIBLE_VIEW}.dataset.x") == "tput/user"
        assert browser.eval("document.querySelectorAll('.cardgen-tradeoff-view:not([hidden])').length") == 1
        assert browser.eval(f"{VISIBLE_VIEW}.querySelectorAll('polyline').length") == 3 * PAIRS
        _set(browser, ".cardgen-axis-y", "usd")
        _set(browser, ".cardgen-axis-x", "ttft")
        assert browser.eval(f"{VISIBLE_VIEW}.dataset.y + '/' + {VISIBLE_VIEW}.dataset.x") == "usd/ttft"
        assert browser.eval(f"{VISIBLE_VIEW}.querySelectorAll('polyline').length") == 2 * PAIRS  # not the unpriced
        view = browser.eval("location.hash")
        assert "x=ttft" in view and "y=usd" in view
        chart = _csv(browser, ".cardgen-tradeoff-view:not([hidden]) .cardgen-csv").splitlines()
        assert chart[0] == "series,label,x,y" and len(chart) - 1 == browser.eval(
            f"{VISIBLE_VIEW}.querySelectorAll('circle[data-x]').length")
        assert {line.split(",")[0] for line in chart[1:]} == {"A100-80GB (measured)", "H100 (measured)"}

        # a shared link, opened afresh: the energy axis, measured runs only
        browser.goto(served + "methodology.html")
        browser.goto(served + "index.html#kind=measured&x=ttft&y=jpt")
        assert browser.eval("document.querySelector('.cardgen-axis-y').value") == "jpt"
        assert browser.eval("document.querySelector('.cardgen-axis-x').value") == "ttft"
        assert browser.eval(f"{VISIBLE_VIEW}.querySelectorAll('polyline').length") == PAIRS  # the run with energy
        table = _csv(browser, ".cardgen-board .cardgen-csv-line .cardgen-csv").splitlines()
        assert table[0].split(",")[:2] == ["Model", "GPU"] and "$ / M tokens @10 parallel" in table[0]
        assert len(table) == 3  # the header and the two measured runs the filter shows
        browser.eval("location.hash = ''")
        browser.eval("new Promise(r => setTimeout(r, 100))")
        assert browser.eval(f"{VISIBLE_VIEW}.dataset.y + '/' + {VISIBLE_VIEW}.dataset.x") == "tput/user"
        browser.screenshot(tmp_path / "tradeoff.png", full_page=True)

        # a run's page: its NOTE box lists what the run lacks as a list; every table and chart offers its CSV
        run_page = next(p.relative_to(site).as_posix() for p in site.glob("runs/**/*.html"))
        browser.goto(served + run_page)
        items = browser.eval("Array.from(document.querySelectorAll('.admonition.note ul li')).map(l => l.textContent)")
        assert items and any("batch" in i for i in items), items
        assert "- no" not in browser.eval("document.querySelector('.admonition.note').textContent")
        tables = browser.eval("document.querySelectorAll('article table').length")
        assert tables >= 5 and browser.eval("document.querySelectorAll('article .cardgen-csv').length") >= tables
        first = _csv(browser, "article .cardgen-csv-line .cardgen-csv").splitlines()
        assert first[0].startswith("Metric,Value")  # the card's main table, as shown
        assert browser.errors() == []
