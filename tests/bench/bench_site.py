"""`make bench`: the time `cardgen site` takes to build a site of 100 runs (25 models x 4 GPUs), in a temporary
folder (site_src/ is not touched).

The runs are sample runs (:mod:`cardgen.site.sample`: the virtual server's runs in virtual time, 20 requests per
closed-loop point), each analysed and given its own card and summary. Drawing every run's figures would take
about 2 s of CPU a run, so the figures are drawn for real once per GPU (the runs of one GPU share its speed, so
their plots are the same) and copied into that GPU's runs."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from pathlib import Path

from cardgen.analysis.analyse import analyse, write_analysis
from cardgen.analysis.rundata import load_run
from cardgen.card import render_card
from cardgen.card.context import card_date
from cardgen.rundir import CARD_MD, FIGURES_DIR, RunDir
from cardgen.site import build_site
from cardgen.site.sample import isolated_config, write_sample_run

REPO = Path(__file__).resolve().parents[2]
MODELS = 25
GPUS = ("A100-80GB", "H100", "L40S", "A6000")
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def speed(g: int) -> float:
    return 0.5 + g * 0.4


def make_run(root: Path, template: Path, m: int, g: int) -> Path:
    """Run ``m`` on GPU ``g``: its raw files, its analysis and card, the figures drawn for ``template``."""
    run = write_sample_run(root, model=f"org/model-{m:02d}", gpu=GPUS[g], speed=speed(g), modelled=(m + g) % 3 == 0,
                           started=START + dt.timedelta(hours=m * 4 + g), requests=20, render=False)
    shutil.copytree(template / FIGURES_DIR, run / FIGURES_DIR)
    data = load_run(run)
    analysis = analyse(data)
    analysis.summary.figures = RunDir(template).load_summary().figures
    write_analysis(analysis, run)
    RunDir(run).write_text(CARD_MD, render_card(analysis, date=card_date(data.info)))
    return run


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cardgen-bench-site-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        templates = [write_sample_run(work / "templates", model=f"template-{g}", gpu=gpu, speed=speed(g), requests=20)
                     for g, gpu in enumerate(GPUS)]
        for m in range(MODELS):
            for g in range(len(GPUS)):
                make_run(work / "runs", templates[g], m, g)
        made = time.perf_counter() - t0
        config = isolated_config(REPO / "mkdocs.yml", work)
        warnings: list[str] = []
        result = build_site(work / "runs", site_dir=work / "site", config_file=config, warn=warnings.append)
        pages = sum(1 for _ in (work / "site").rglob("*.html"))
        print(f"sample runs made: {MODELS * len(GPUS)} in {made:.1f} s (figures drawn for {len(GPUS)} of them)")
        print(
            f"site of {result.runs} runs: {pages} pages built in {result.seconds:.1f} s (limit 60 s)"
            + (f"; {len(warnings)} warnings" if warnings else "")
        )


if __name__ == "__main__":
    main()
