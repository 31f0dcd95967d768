"""Helpers for the site tests: sample runs with a hostile model name, a hand-broken card and broken run
directories; the built site they make."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cardgen.site import SiteBuild
from cardgen.site.sample import write_sample_run
from cardgen.site.serve import make_server

REPO = Path(__file__).resolve().parents[2]
EVIL = "<script>alert(1)</script>"


def make_runs(root: Path) -> dict[str, Path]:
    """Four good runs of two models (one named like an XSS probe), a run with a broken summary, one without
    a card, and a README.md that is not a run."""
    runs = {
        "a100": write_sample_run(root, gpu="A100-80GB", speed=1.0),
        "h100": write_sample_run(
            root, gpu="H100", speed=1.8, started=dt.datetime(2026, 11, 22, 8, tzinfo=dt.UTC)
        ),
        "evil1": write_sample_run(
            root / "team" / "deep",
            model=EVIL,
            gpu="L4 $x$ <i>",
            engine="<b>vllm</b>",
            modelled=True,
            speed=0.4,
            started=dt.datetime(2026, 11, 20, tzinfo=dt.UTC),
        ),
        "evil2": write_sample_run(
            root,
            model=EVIL,
            gpu="A6000",
            modelled=True,
            speed=0.6,
            started=dt.datetime(2026, 11, 23, tzinfo=dt.UTC),
        ),
    }
    card = runs["evil2"] / "README.md"
    card.write_text(
        card.read_text("utf-8") + "\n<script>alert(2)</script>\n\n"
        '<img src="x" onerror="alert(3)">\n\n![gone](figures/missing.png)\n\n'
        "[escape](../../../etc/passwd) [js](javascript:alert(4))\n",
        "utf-8",
    )
    broken = root / "broken" / "20261101T000000Z"
    broken.mkdir(parents=True)
    (broken / "summary.json").write_text("{not json", "utf-8")
    (broken / "README.md").write_text("# card\n", "utf-8")
    no_card = root / "nocard" / "20261102T000000Z"
    no_card.mkdir(parents=True)
    (no_card / "summary.json").write_text(json.dumps({"model": "x"}), "utf-8")
    (root / "README.md").write_text("# Notes about these runs, not a run\n", "utf-8")
    return runs


@dataclass
class Built:
    build: SiteBuild
    runs: dict[str, Path]
    site: Path
    docs: Path
    config: Path
    warnings: list[str]

    def html(self, rel: str) -> str:
        return (self.site / rel).read_text("utf-8")

    def all_html(self) -> dict[str, str]:
        return {p.relative_to(self.site).as_posix(): p.read_text("utf-8") for p in self.site.rglob("*.html")}


@contextmanager
def serving(site: Path) -> Iterator[str]:
    """The built site over HTTP on loopback while the block runs: its base URL."""
    server = make_server(site, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
