"""The scraper's own process (``python -m cardgen.load.scrapeproc``, started by
:class:`cardgen.load.scraper.Scraper`): scrape the server's ``/metrics`` every ``interval`` seconds into
``server_metrics.jsonl``, one parsed sample per line, flushed at once.

It never scrapes faster than every 0.1 s (a scrape costs the server under test too), and stops when told to
(SIGTERM: after one last scrape, so the counters bracket the whole run), when its parent dies, or after
``--stop-after`` seconds. It imports only what a scrape needs (HTTP, the exposition parser, the sample's line),
so that it is scraping within about half a second of its start: the load waits for its first line.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import requests

from cardgen.promtext import parse_metrics
from cardgen.schemas.records import MetricSample, metric_line

MIN_INTERVAL_S = 0.1


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
    main()
