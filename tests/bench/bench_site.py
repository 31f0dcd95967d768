"""`make bench`: the time `cardgen site` takes to build a site of 100 runs (25 models x 4 GPUs, sample
runs with figures, tables and 200-line requests.jsonl), in a temporary folder (site_src/ is not touched)."""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from pathlib import Path

from cardgen.site import build_site
from cardgen.site.sample import isolated_config, write_sample_run

REPO = Path(__file__).resolve().parents[2]
MODELS = 25
GPUS = ("A100-80GB", "H100", "L40S", "A6000")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cardgen-bench-site-") as tmp:
        work = Path(tmp)
        start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        t0 = time.perf_counter()
        for m in range(MODELS):
            for g, gpu in enumerate(GPUS):
                write_sample_run(
                    work / "runs",
                    model=f"org/model-{m:02d}",
                    gpu=gpu,
                    speed=0.5 + g * 0.4 + m / 50,
                    modelled=(m + g) % 3 == 0,
                    started=start + dt.timedelta(hours=m * 4 + g),
                    requests=200,
                )
        made = time.perf_counter() - t0
        config = isolated_config(REPO / "mkdocs.yml", work)
        warnings: list[str] = []
        result = build_site(work / "runs", site_dir=work / "site", config_file=config, warn=warnings.append)
        pages = sum(1 for _ in (work / "site").rglob("*.html"))
        print(f"sample runs written: {MODELS * len(GPUS)} in {made:.1f} s")
        print(
            f"site of {result.runs} runs: {pages} pages built in {result.seconds:.1f} s (limit 60 s)"
            + (f"; {len(warnings)} warnings" if warnings else "")
        )
