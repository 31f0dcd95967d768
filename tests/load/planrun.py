"""Run a suite through the load runner itself, with the :class:`~cardgen.load.runner.RunPlan` options that
``cardgen build`` does not expose (attempts, run_saturated), in a load process of its own (Locust monkey-patches
the process that imports it):

    python planrun.py URL SUITE.yaml OUT_DIR [--attempts JSON] [--run-saturated] [--workers N]

Prints one JSON line per point outcome, as ``on_point_end`` received them, in order.
"""

import locust  # noqa: F401, I001  (monkey-patches for gevent: keep first)

import argparse
import json
from pathlib import Path

from cardgen.load.messages import Setup
from cardgen.recorder import Recorder
from cardgen.load.runner import RunPlan, run_plan
from cardgen.load.scraper import Scraper
from cardgen.load.stage import size_prompts
from cardgen.points import expand
from cardgen.suite import parse_suite


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("suite", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--attempts", default="{}")
    parser.add_argument("--run-saturated", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    points = expand(parse_suite(args.suite.read_text(), source=str(args.suite)))
    templates, _ = size_prompts(args.url, {}, "test-model", points)
    setup = Setup(model="test-model", engine="cardgen-sim", templates=templates, nonce=1)
    args.out.mkdir(parents=True, exist_ok=True)
    metrics = args.out / "server_metrics.jsonl"
    ended: list[str] = []
    plan = RunPlan(url=args.url, points=points, setup=setup, workers=args.workers, server_metrics=metrics,
                   attempts=json.loads(args.attempts), run_saturated=args.run_saturated,
                   on_point_end=lambda point, outcome: ended.append(outcome.model_dump_json()))
    recorder = Recorder(args.out)
    with Scraper(f"{args.url}/metrics", metrics, interval_s=0.1):
        outcome = run_plan(plan, recorder)
    recorder.close()
    assert outcome.fatal is None and not outcome.interrupted, outcome
    print("\n".join(ended))


if __name__ == "__main__":
    main()
