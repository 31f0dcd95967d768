"""A Locust worker process: ``python -m cardgen.load.worker --master-host H --master-port P --url URL``.

Started by the master (``cardgen build --workers N``) on this host, or by hand on other machines
(``cardgen worker``). Its agent runs the share of each point the master assigns; its record sink ships every
record to the master as soon as it ends, and tells the master (a ``Fatal`` message) when one cannot be
shipped, so the run stops and fails instead of going on without it.

Before the load it answers the master's clock pings (``cardgen.load.clocks``) and, once set up, says whether it
reaches the server (``Reached``: a TCP connection to the URL's host and port), so that a worker that cannot is
named before any point starts, and, where the master asked (``--low-latency``), whether it holds its host's CPUs
awake (``cardgen.load.wake``). ``CARDGEN_CLOCK_SHIFT_S`` (a test seam) moves every stamp it gives by that much.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any
from urllib.parse import urlsplit

import gevent
from locust.env import Environment

from cardgen.errors import one_line
from cardgen.load import clocks, messages
from cardgen.load.agent import Agent
from cardgen.load.messages import (
    Assignment,
    ClockPing,
    ClockPong,
    Done,
    Fatal,
    Listening,
    LoadgenTick,
    Reached,
    Record,
    Setup,
    StopPoint,
)
from cardgen.load.runner import freeze_heap
from cardgen.load.sink import RecordSink, fault_from_env
from cardgen.load.wake import CpusAwake

log = logging.getLogger("cardgen.load")

REACH_TIMEOUT_S = 5.0


def reach(url: str, *, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why this host cannot open a TCP connection to ``url``'s host and port (None: it can)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"cannot reach the server {url} ({host}:{port}): {type(exc).__name__}: {one_line(exc)}"
    return None


def own_address(master_host: str, master_port: int) -> str | None:
    """The address this host reaches the master from (the route's source; nothing is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_host, master_port))
            return str(s.getsockname()[0])
    except OSError:
        return None


def shifted(message: messages.Message, by_s: float) -> messages.Message:
    """``message`` with its stamps moved by the clock seam (:data:`cardgen.load.clocks.SHIFT_ENV`)."""
    if not by_s:
        return message
    match message:
        case Record(record=rec):
            return Record(record=clocks.shift_record(rec, by_s))
        case LoadgenTick(sample=sample):
            return LoadgenTick(sample=clocks.shift_sample(sample, by_s))
        case Done():
            return message.model_copy(update={"started_unix": message.started_unix + by_s,
                                              "ended_unix": message.ended_unix + by_s})
    return message


def _exit_with_parent(parent_pid: int) -> None:
    """A worker started by a local master ends when the master dies (no orphan keeps loading the server)."""
    while True:
        gevent.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


def run_worker(*, master_host: str, master_port: int, url: str, name: str = "worker",
               parent_pid: int | None = None) -> None:
    if parent_pid is not None:
        gevent.spawn(_exit_with_parent, parent_pid)
    runner: Any = None  # the worker runner, made once the environment exists
    shift_s = clocks.shift_from_env()

    def send(message: messages.Message) -> None:
        messages.send(runner, shifted(message, shift_s))

    agent = Agent(worker=name, send=send, url=url)
    awake = CpusAwake(False)  # the master's Setup says whether to hold this host's CPUs awake (--low-latency)

    def fatal(reason: str) -> None:
        """Tell the master; a worker that cannot even do that leaves, and the master sees it lost."""
        try:
            send(Fatal(worker=agent.worker, error=reason, delivered=sink.delivered))
        except Exception as exc:
            log.error("cardgen worker %s: %s; the master could not be told (%s)", agent.worker, reason, exc)
            os._exit(4)

    sink = RecordSink(lambda rec: send(Record(record=rec)), on_fatal=fatal, fail_at=fault_from_env())
    env = Environment(user_classes=[agent.user_class()], host=url)
    env.events.request.add_listener(sink.on_request)
    runner = env.create_worker_runner(master_host, master_port)

    def on_ping(msg: ClockPing, node: str) -> None:
        received = clocks.now(shift_s)
        send(ClockPong(worker=agent.worker, seq=msg.seq, master_unix=msg.master_unix, received_unix=received,
                       sent_unix=clocks.now(shift_s)))

    def on_setup(msg: Setup, node: str) -> None:
        nonlocal awake
        agent.setup(msg)
        freeze_heap()
        if msg.low_latency and not awake.held:
            awake = CpusAwake(True).open()
        send(Reached(worker=agent.worker, error=reach(url), cpus_awake=awake.words))

    def on_point(msg: Assignment, node: str) -> None:
        agent.assign(msg)

    def on_stop_point(msg: StopPoint, node: str) -> None:
        agent.stop_point(msg.point)

    messages.listen(runner, ClockPing, on_ping, on_error=fatal)
    messages.listen(runner, Setup, on_setup, on_error=fatal)
    messages.listen(runner, Assignment, on_point, on_error=fatal)
    messages.listen(runner, StopPoint, on_stop_point, on_error=fatal)
    send(Listening(worker=name, host=socket.gethostname(), address=own_address(master_host, master_port)))  # only now: a Setup that came before its handler would be dropped
    try:
        runner.greenlet.join()
        agent.stop()
    finally:
        awake.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cardgen-worker")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    run_worker(master_host=args.master_host, master_port=args.master_port, url=args.url, name=args.name,
               parent_pid=args.parent_pid)


if __name__ == "__main__":
    main()
