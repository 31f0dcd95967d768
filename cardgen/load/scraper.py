"""Scrape the server's ``/metrics`` every ``interval`` seconds into ``server_metrics.jsonl``.

Runs in its own process (``python -m cardgen.load.scraper``), away from the load generator's event loop:
parsing Prometheus text is CPU work that would otherwise delay chunk timestamps. It never scrapes faster
than every 0.1 s (a scrape costs the server under test too), stops when told to (SIGTERM) or when its
parent dies, and appends one parsed sample per line, flushed at once. The load process reads that file back
between points (:class:`ScrapeLog`) to judge whether a closed-loop point saturated the server.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from cardgen.engines import counter, load_gauges, metric_names
from cardgen.promtext import parse_metrics
from cardgen.recorder import metric_line
from cardgen.saturation import Reading
from cardgen.schemas.records import MetricSample

MIN_INTERVAL_S = 0.1
FIRST_SCRAPE_TIMEOUT_S = 10.0


def scrape_loop(url: str, out: Path, *, interval_s: float, parent_pid: int | None = None,
                headers: dict[str, str] | None = None, stop_after_s: float | None = None) -> None:
    interval_s = max(interval_s, MIN_INTERVAL_S)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    session = requests.Session()
    session.trust_env = False
    session.headers.update(headers or {})
    started = time.monotonic()
    next_at = time.monotonic()
    failures_in_a_row = 0
    last = False
    with Path(out).open("a", encoding="utf-8") as fh:
        while True:
            if stop["now"]:
                last = True  # one more scrape after the load ended, so counters bracket the whole run
            if parent_pid is not None and os.getppid() != parent_pid:
                break
            if stop_after_s is not None and time.monotonic() - started > stop_after_s:
                break
            t = time.time()
            try:
                resp = session.get(url, timeout=max(2.0, interval_s * 4))
                if resp.status_code != 200:
                    sample = MetricSample(t=t, t_end=time.time(), error=f"HTTP {resp.status_code}")
                else:
                    sample = MetricSample(t=t, t_end=time.time(), samples=parse_metrics(resp.text))
                failures_in_a_row = 0 if resp.status_code == 200 else failures_in_a_row + 1
            except (requests.RequestException, ValueError) as exc:
                sample = MetricSample(t=t, t_end=time.time(), error=f"{type(exc).__name__}")
                failures_in_a_row += 1
            fh.write(metric_line(sample))
            fh.flush()
            if last:
                break
            if failures_in_a_row >= 20:  # the endpoint is not there: say so once a second, not twice
                interval = max(interval_s, 1.0)
            else:
                interval = interval_s
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow server): do not burst to catch up
                next_at = time.monotonic()
                delay = 0
            _sleep_unless(stop, delay)


def _sleep_unless(stop: dict[str, bool], seconds: float) -> None:
    """Sleep, waking early (within 20 ms) when told to stop."""
    end = time.monotonic() + seconds
    while not stop["now"]:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.02))


class Scraper:
    """The scraper child process, as a context manager in the load process."""

    def __init__(self, url: str, out: Path, *, interval_s: float = 0.5, api_key: str | None = None) -> None:
        self.url, self.out, self.interval_s = url, out, interval_s
        self.api_key = api_key
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Scraper:
        env = dict(os.environ)
        if self.api_key:
            env["CARDGEN_SCRAPE_API_KEY"] = self.api_key  # never on the command line
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cardgen.load.scraper", "--url", self.url, "--out", str(self.out),
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


NICENESS = 10


def _yield_cpu() -> None:
    """Run below the load generator's priority: a scrape's parsing is bursts of CPU every ``interval``, and on
    a machine whose cores are all busy (the load process, a local server) a scraper at the same priority
    preempts the load process for milliseconds when it wakes, delaying an open loop's sends. Its readings lose
    nothing that matters (each is stamped when it is taken, and they are read between points)."""
    try:
        os.nice(NICENESS)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cardgen-scraper")
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--stop-after", type=float)
    args = parser.parse_args(argv)
    key = os.environ.pop("CARDGEN_SCRAPE_API_KEY", None)
    headers = {"Authorization": f"Bearer {key}"} if key else None
    _yield_cpu()
    try:
        scrape_loop(args.url, Path(args.out), interval_s=args.interval, parent_pid=args.parent_pid,
                    headers=headers, stop_after_s=args.stop_after)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
