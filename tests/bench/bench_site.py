"""`make bench`: the time `cardgen site` takes, in a temporary folder (site_src/ is not touched).

1. A site of 1,000 runs: 1,000 copies of the committed fixture run (tests/data/run_small, rendered once), 500
   models of two runs each; the copies are hard links but for their summary.json (the model's name). Built
   from nothing (limit 60 s), then again with nothing changed, then after one new run: how long, and how many
   pages were laid out and files written.
2. A site of 100 distinct runs (25 models x 4 GPUs): sample runs (:mod:`cardgen.site.sample`, the virtual server
   in virtual time, 20 requests per closed-loop point), each analysed with its own card, summary and bootstrap
   digests; their figures drawn once per GPU and copied (drawing is the card's cost, not the site's).

``CARDGEN_BENCH_PROFILE=1``: the cold build of the 1,000 runs under cProfile, its top functions printed.
"""

from __future__ import annotations

import cProfile
import datetime as dt
import json
import os
import pstats
import resource
import shutil
import tempfile
import time
from pathlib import Path

from cardgen.analysis.analyse import analyse, write_analysis
from cardgen.analysis.rundata import load_run
from cardgen.card import render_card, render_run
from cardgen.card.sections.head import card_date
from cardgen.diff import write_digests
from cardgen.rundir import CARD_MD, FIGURES_DIR, SUMMARY_JSON, RunDir
from cardgen.site import SiteBuild, build_site
from cardgen.site.sample import isolated_config, write_sample_run

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "run_small"
COPIES = 1000
MODELS = 25
GPUS = ("A100-80GB", "H100", "L40S", "A6000")
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def copy_run(template: Path, dst: Path, model: str) -> None:
    """A copy of ``template`` as ``model``'s run: every file a hard link, summary.json rewritten."""
    dst.mkdir(parents=True)
    for src in template.rglob("*"):
        out = dst / src.relative_to(template)
        if src.is_dir():
            out.mkdir(exist_ok=True)
        elif src.name != SUMMARY_JSON or src.parent != template:
            os.link(src, out)
    summary = json.loads((template / SUMMARY_JSON).read_text("utf-8"))
    summary["model"] = model
    (dst / SUMMARY_JSON).write_text(json.dumps(summary, indent=2), "utf-8")


def _changed(site: Path, since: float) -> int:
    return sum(1 for p in site.rglob("*") if p.is_file() and p.stat().st_mtime > since)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the page workers): the build's own work, whatever
    else the machine runs at the same time."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _build(label: str, runs: Path, site: Path, config: Path, *, files_since: float | None = None) -> SiteBuild:
    cpu = _cpu_s()
    build = build_site(runs, site_dir=site, config_file=config)
    cpu = _cpu_s() - cpu
    stages = ", ".join(f"{k} {v:.1f}" for k, v in build.stages.items())
    written = f", {_changed(site, files_since)} files written" if files_since is not None else ""
    print(f"  {label}: {build.seconds:.1f} s ({stages}; {cpu:.0f} CPU s on {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}); {build.pages_rendered} of {build.pages_total} pages laid out{written}")
    return build


def copies(work: Path) -> None:
    template = work / "template"
    shutil.copytree(FIXTURE, template)
    render_run(template)
    for i in range(COPIES):
        copy_run(template, work / "runs" / f"model-{i // 2:03d}" / f"2026092{1 + i % 2}T141320Z",
                 f"org/model-{i // 2:03d}")
    config = isolated_config(REPO / "mkdocs.yml", work)
    site = work / "site"
    profile = cProfile.Profile() if os.environ.get("CARDGEN_BENCH_PROFILE") else None
    print(f"site of {COPIES} runs (copies of the fixture, 500 models):")
    if profile:
        profile.enable()
    _build("built from nothing (limit 60 s)", work / "runs", site, config)
    if profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    mark = time.time()
    _build("built again, nothing changed", work / "runs", site, config, files_since=mark)
    copy_run(template, work / "runs" / "model-000" / "20260923T141320Z", "org/model-000")
    mark = time.time()
    _build("after one new run", work / "runs", site, config, files_since=mark)


def make_run(root: Path, template: Path, m: int, g: int) -> Path:
    """Run ``m`` on GPU ``g``: its raw files, its analysis, digests and card, the figures drawn for ``template``."""
    run = write_sample_run(root, model=f"org/model-{m:02d}", gpu=GPUS[g], speed=0.5 + g * 0.4,
                           modelled=(m + g) % 3 == 0, started=START + dt.timedelta(hours=m * 4 + g), requests=20,
                           render=False)
    shutil.copytree(template / FIGURES_DIR, run / FIGURES_DIR)
    data = load_run(run)
    analysis = analyse(data)
    analysis.summary.figures = RunDir(template).load_summary().figures
    write_analysis(analysis, run)
    write_digests(analysis, run)
    RunDir(run).write_text(CARD_MD, render_card(analysis, date=card_date(data.info)))
    return run


def distinct(work: Path) -> None:
    t0 = time.perf_counter()
    templates = [write_sample_run(work / "templates", model=f"template-{g}", gpu=gpu, speed=0.5 + g * 0.4,
                                  requests=20) for g, gpu in enumerate(GPUS)]
    for m in range(MODELS):
        for g in range(len(GPUS)):
            make_run(work / "runs", templates[g], m, g)
    made = time.perf_counter() - t0
    config = isolated_config(REPO / "mkdocs.yml", work)
    print(f"site of {MODELS * len(GPUS)} distinct runs ({MODELS} models x {len(GPUS)} GPUs, made in {made:.0f} s):")
    _build("built from nothing", work / "runs", work / "site", config)


def main() -> None:
    for part in (copies, distinct):
        with tempfile.TemporaryDirectory(prefix="cardgen-bench-site-") as tmp:
            part(Path(tmp))


if __name__ == "__main__":
    main()
