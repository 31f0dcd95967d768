"""Scrape the server's ``/metrics`` every ``interval`` seconds into ``server_metrics.jsonl``.

The scraping runs in its own process (:mod:`cardgen.load.scrapeproc`), away from the load generator's event loop:
parsing Prometheus text is CPU work that would otherwise delay chunk timestamps. The load process reads that file back
between points (:class:`ScrapeLog`) to judge whether a closed-loop point saturated the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cardgen.engines import counter, load_gauges, metric_names
from cardgen.saturation import Reading

FIRST_SCRAPE_TIMEOUT_S = 10.0


class Scraper:
    """The scraper child process, as a context manager in the load process."""

    def __init__(self, url: str, out: Path, *, interval_s: float = 0.5, api_key: str | None = None) -> None:
        self.url, self.out, self.interval_s = url, out, interval_s
        self.api_key = api_key
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Scraper:
        env = dict(os.environ)
        if self.api_key:
            env["CARDGEN_SCRAPE_API_KEY"] = self.api_key  # never on the command line
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cardgen.load.scrapeproc", "--url", self.url, "--out", str(self.out),
             "--interval", str(self.interval_s), "--parent-pid", str(os.getpid())],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        # the first scrape lands before the first request, so counters bracket the whole run
        deadline = time.monotonic() + FIRST_SCRAPE_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.out.exists() and self.out.stat().st_size > 0:
                break
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ScrapeLog:
    """The scraper's file as it grows, read by the load process between points: each scrape's load gauges
    (:class:`cardgen.saturation.Reading`), so that a closed-loop point's saturation is judged on what the server showed
    without polling ``/metrics`` from the event loop that stamps chunk arrivals. Only whole lines are read
    (the scraper may be writing the last one); the parsed exposition is dropped once read."""

    def __init__(self, path: Path, engine: str | None) -> None:

        self.path, self.engine = Path(path), engine
        self.preemptions_name = metric_names(engine).get("preemptions", "")
        self.readings: list[Reading] = []
        self._offset = 0

    def read(self) -> list[Reading]:
        """Read what the scraper appended since the last call; every reading so far, in time order."""

        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return self.readings
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        for line in whole.splitlines():
            try:
                sample = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(sample, dict) or sample.get("error") or "samples" not in sample:
                continue
            gauges = load_gauges(self.engine, sample)
            self.readings.append(Reading(t=float(sample["t"]), usage=gauges["usage"], waiting=gauges["waiting"],
                                              preemptions=counter(sample, self.preemptions_name)))
        return self.readings
