"""The built site: pages, leaderboard, escaping, offline, links, raw files, broken and empty runs, serving."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from site_helpers import REPO

import cardgen.site.build as build_module
from cardgen.cli.main import main
from cardgen.errors import UsageError
from cardgen.sim.calibration import shipped_markdown
from cardgen.site import GENERATED, build_site
from cardgen.site.build import _calibration
from cardgen.site.sample import isolated_config, write_sample_run
from cardgen.site.serve import make_server

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast


class _Refs(HTMLParser):
    """Every URL a page loads (scripts, styles, images, icons) and every hyperlink, with the element."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[tuple[str, str]] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        for key in ("src", "srcset", "poster", "data"):
            if key in a:
                self.loads.append((tag, a[key]))
        if tag == "link" and "href" in a:
            self.loads.append((tag, a["href"]))


def _refs(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    return parser


def test_pages_for_every_run_model_gpu_and_comparison(built_site):
    site = built_site.site
    for rel in (
        "index.html",
        "methodology.html",
        "models/index.html",
        "gpus/index.html",
        "compare/index.html",
    ):
        assert (site / rel).is_file(), rel
    run_pages = sorted(p.relative_to(site).as_posix() for p in (site / "runs").rglob("index.html"))
    assert len(run_pages) == 4 == built_site.build.runs
    assert any("team/deep" in p for p in run_pages)  # found at any depth, path kept
    assert len(list((site / "models").glob("*/index.html"))) == 2
    assert len(list((site / "gpus").glob("*/index.html"))) == 4
    compares = sorted((site / "compare").glob("*/index.html"))
    assert len(compares) == 2
    assert all('class="cardgen-chart"' in c.read_text("utf-8") for c in compares)  # curves as inline SVG


def test_broken_runs_are_skipped_with_a_warning(built_site):
    skipped = [w for w in built_site.warnings if w.startswith("skipping")]
    assert len(skipped) == 2 == built_site.build.skipped
    assert any("broken" in w and "not readable JSON" in w for w in skipped)
    assert any("nocard" in w and "no README.md" in w for w in skipped)
    assert any("figures/missing.png" in w for w in built_site.warnings)


def test_leaderboard_lists_runs_newest_first_with_headline_figures(built_site):
    html = built_site.html("index.html")
    board = html[html.index('class="cardgen-board"') :]
    rows = re.findall(r'<tr data-kind="(\w+)" data-key="[^"]+">(.*?)</tr>', board, re.DOTALL)
    assert [k for k, _ in rows] == ["modelled", "measured", "measured", "modelled"]
    dates = re.findall(r"2026-11-\d\d \d\d:\d\d", board)
    assert dates == sorted(dates, reverse=True)
    assert "24,300" in rows[1][1] and "13,500" in rows[2][1]  # prompt ingestion, tok/s
    assert "42.9" in rows[2][1]  # generation at 10 parallel
    assert "113,200" in rows[2][1]
    for title in (
        "Model",
        "GPU",
        "Engine",
        "Figures",
        "Prompt ingestion",
        "Generation @10",
        "KV cache",
        "Date",
    ):
        assert title in board
    assert "leaderboard.js" in html and "cardgen.css" in html


def test_server_text_is_escaped_everywhere(built_site):
    pages = built_site.all_html()
    for rel, html in pages.items():
        for probe in ("<script>alert", "onerror=", "<b>vllm</b>", "<i></", "javascript:alert"):
            assert probe not in html, (rel, probe)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["index.html"]
    evil_page = next(h for r, h in pages.items() if r.startswith("runs/") and "alert(2)" in h)
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in evil_page
    index = json.loads((built_site.site / "search" / "search_index.json").read_text("utf-8"))
    assert "<script>alert" not in json.dumps(index)


def test_offline_nothing_external_is_loaded(built_site):
    for rel, html in built_site.all_html().items():
        refs = _refs(html)
        for tag, url in refs.loads:
            assert not re.match(r"^(https?:)?//", url), (rel, tag, url)
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html
    css = "".join(p.read_text("utf-8") for p in built_site.site.rglob("*.css"))
    assert "fonts.googleapis" not in css


def test_every_internal_link_and_image_resolves(built_site):
    site = built_site.site
    for rel, html in built_site.all_html().items():
        if rel == "404.html":  # served at any path: MkDocs links it from the site root
            continue
        refs = _refs(html)
        for url in refs.links + [u for _, u in refs.loads]:
            parts = urlsplit(url)
            if parts.scheme or url.startswith(("#", "//")) or not parts.path:
                continue
            target = (site / rel).parent / unquote(parts.path)
            assert target.exists(), f"{rel} links to missing {url}"


def test_card_figures_and_raw_files_are_served_next_to_the_card(built_site):
    run_dir = built_site.runs["a100"]
    page = next(
        p
        for p in (built_site.site / "runs").rglob("index.html")
        if "20261121t195700z" in str(p) and "codellama" in str(p)
    )
    html = page.read_text("utf-8")
    assert 'src="figures/total_throughput.png"' in html and 'src="figures/speed_ttft_in1024-out128.png"' in html
    for rel in ("summary.json", "requests.jsonl", "run.json", "tables/serving.csv", "tables/serving.json"):
        assert f'href="{rel}"' in html, rel
        assert (page.parent / rel).read_bytes() == (run_dir / rel).read_bytes()
    assert "base_model:" not in html and '"base_model"' not in html  # front matter is not shown as text
    assert "Performance card" in html


def test_compare_page_has_scale_tables(built_site):
    page = next((built_site.site / "compare").glob("codellama*/index.html")).read_text("utf-8")
    assert "Headline figures" in page and "scale" in page
    assert "1.800" in page  # H100 sample runs 1.8 x the A100 one
    assert "Total output throughput" in page
    assert "closed · 1024 → 128 tokens · 10 parallel" in page
    # every scale carries its significance: the ingestion sweep resamples (▲, with its interval), one round a
    # point does not (?, saying why)
    assert re.search(r'class="cardgen-num cardgen-better"[^>]*title="95 % interval [0-9.]+–[0-9.]+: faster">1\.80\d ▲',
                     page)
    assert re.search(r'cardgen-unknown"[^>]*title="cannot tell: fewer than 5 rounds: no interval">', page)
    assert "configurations" in page and "A100-80GB" in page and "H100" in page


def test_leaderboard_chart_draws_every_run_with_its_row(built_site):
    html = built_site.html("index.html")
    board = html[html.index('class="cardgen-board"'):]
    chart = board[board.index('class="cardgen-chart"'):board.index("</svg>")]
    assert board.index('class="cardgen-chart"') < board.index("<table")  # above the table
    rows = re.findall(r'<tr data-kind="\w+" data-key="([^"]+)"', board)
    markers = re.findall(r'<circle [^>]*data-key="([^"]+)"', chart)
    assert sorted(markers) == sorted(rows) and len(rows) == 4
    hollow = re.findall(r'<circle [^>]*fill="#ffffff"[^>]*data-key="([^"]+)"', chart)
    assert len(hollow) == 2  # the two modelled runs
    assert "measured" in board and "modelled" in board and 'class="cardgen-gpu"' in board


def test_model_page_shows_the_runs_curves_first(built_site):
    page = next((built_site.site / "models").glob("codellama*/index.html")).read_text("utf-8")
    article = page[page.index("<h1"):]
    assert article.index('class="cardgen-chart"') < article.index('class="cardgen-board"')
    assert "Throughput against interactivity, 1024 in / 128 out" in article
    assert article.count('<polyline') >= 4  # two runs, two planes each
    assert "A100-80GB · vllm" in article and "H100 · vllm" in article


def test_only_the_top_pages_are_searched(built_site):
    index = json.loads((built_site.site / "search" / "search_index.json").read_text("utf-8"))
    pages = {d["location"].split("#")[0] for d in index["docs"]}
    assert {"index.html", "methodology.html", "models/index.html", "gpus/index.html", "compare/index.html"} <= pages
    assert not any(p.startswith(("runs/", "compare/codellama")) for p in pages)


def test_methodology_defines_metrics_and_includes_calibration(built_site):
    html = built_site.html("methodology.html")
    for term in (
        "TTFT",
        "TPOT",
        "ITL",
        "Decode speed",
        "Speed from start",
        "goodput",
        "Prompt ingestion",
        "usage_extrapolation",
        "saturation_probe",
        "server_config",
        "scale",
    ):
        assert term in html, term
    assert "Virtual server calibration" in html
    assert "planned as vLLM plans it at start-up" in html  # the shipped table's own words


def test_the_calibration_table_is_read_not_computed_and_its_absence_is_said(monkeypatch):
    assert _calibration(lambda w: None) == shipped_markdown()
    read = subprocess.run([sys.executable, "-c", "import sys; from cardgen.site.build import _calibration; "
                           "_calibration(print); print(sorted(m for m in sys.modules if m.startswith('cardgen.sim')))"],
                          capture_output=True, text=True, check=True)
    assert read.stdout.strip() == "['cardgen.sim']", read.stdout  # the package's data, no simulator module imported
    warnings: list[str] = []
    monkeypatch.setattr(build_module, "CALIBRATION_TABLE", ("cardgen.sim", "data/no-such-table.md"))
    assert _calibration(warnings.append) is None
    assert len(warnings) == 1 and warnings[0].startswith("virtual server calibration left out of the methodology")


def test_generated_paths_are_replaced_and_assets_kept(built_site):
    docs = built_site.docs
    assert (docs / "assets" / "leaderboard.js").is_file()
    assert {p.name for p in docs.iterdir()} <= set(GENERATED) | {"assets"}


def test_empty_runs_dir_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    with pytest.raises(UsageError, match="no runs under"):
        build_site(tmp_path / "runs", site_dir=tmp_path / "site", config_file=config)
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["site", "--runs", str(tmp_path / "runs"), "--config", str(config), "--out", str(tmp_path / "s")]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cardgen: error: no runs under") and "\n" not in err


def test_refuses_to_empty_a_directory_that_is_not_a_site(tmp_path):
    write_sample_run(tmp_path / "runs")
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    with pytest.raises(UsageError, match="refusing"):
        build_site(tmp_path / "runs", site_dir=tmp_path / "precious", config_file=config)
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep me"


def test_cli_builds_and_reports(tmp_path, capsys):
    write_sample_run(tmp_path / "runs")
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    main(["site", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--config", str(config)])
    out = capsys.readouterr().out
    assert "from 1 runs" in out and (tmp_path / "out" / "index.html").is_file()


def test_serve_answers_on_loopback_only(built_site):
    server = make_server(built_site.site, port=0)
    assert server.server_address[0] == "127.0.0.1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(server.url + "index.html", timeout=5) as resp:
            assert resp.status == 200 and b"cardgen-board" in resp.read()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def wait_idle_in_its_accept_loop(pid: int, *, timeout_s: float = 10.0) -> None:
    """Until the server's main thread waits in poll() for the next connection, i.e. no longer inside
    process_request. A Ctrl-C that lands inside it, while the request's thread starts, is lost by
    cardgen.site.serve.SiteServer (its ``except BaseException`` releases the slot the request's thread also
    releases: "Semaphore released too many times" replaces the KeyboardInterrupt and the server keeps serving);
    seen under load with pytest-xdist. Reported; this test checks Ctrl-C on an idle server."""
    wchan = Path(f"/proc/{pid}/task/{pid}/wchan")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if "poll" in wchan.read_text():
                return
        except OSError:
            return  # no /proc here: nothing to wait on
        time.sleep(0.01)
    pytest.fail("the server's main thread never went back to waiting for connections")


# Ctrl-C to a serving process: its lifecycle, on the real clock
@pytest.mark.sockets
def test_cli_serves_until_ctrl_c(tmp_path):
    write_sample_run(tmp_path / "runs")
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "cardgen",
        "site",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "out"),
        "--config",
        str(config),
        "--serve",
        "--port",
        "0",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        url = re.search(r"http://127\.0\.0\.1:\d+/", lines[1]).group(0)
        with urllib.request.urlopen(url + "index.html", timeout=10) as resp:
            assert resp.status == 200
        wait_idle_in_its_accept_loop(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)  # a bound on a hung server, not a timing: the stage may run in the idle class
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Stopped." in out


def test_missing_config_is_a_usage_error(tmp_path):
    write_sample_run(tmp_path / "runs")
    with pytest.raises(UsageError, match="no MkDocs config"):
        build_site(tmp_path / "runs", site_dir=tmp_path / "s", config_file=tmp_path / "absent.yml")


def test_symlinks_out_of_a_run_are_not_published(tmp_path):
    run = write_sample_run(tmp_path / "runs")
    (tmp_path / "secret.txt").write_text("private")
    (run / "tables" / "leak.csv").symlink_to(tmp_path / "secret.txt")
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    build_site(tmp_path / "runs", site_dir=tmp_path / "s", config_file=config)
    assert not list((tmp_path / "s").rglob("leak.csv"))


def test_serve_without_a_site_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no built site"):
        make_server(tmp_path, port=0)
