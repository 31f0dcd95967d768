"""A Locust worker process: ``python -m cardgen.load.worker --master-host H --master-port P --url URL``.

Started by the master (``cardgen build --workers N``) on this host, or by hand on other machines
(``cardgen worker``). Its agent runs the share of each point the master assigns; its record sink ships every
record to the master as soon as it ends, and tells the master (a ``Fatal`` message) when one cannot be
shipped, so the run stops and fails instead of going on without it.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import gevent
from locust.env import Environment

from cardgen.load import messages
from cardgen.load.agent import Agent
from cardgen.load.messages import Assignment, Fatal, Listening, Record, Setup, StopPoint
from cardgen.load.runner import freeze_heap
from cardgen.load.sink import RecordSink, fault_from_env

log = logging.getLogger("cardgen.load")


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

    def send(message: messages.Message) -> None:
        messages.send(runner, message)

    agent = Agent(worker=name, send=send)

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

    def on_setup(msg: Setup, node: str) -> None:
        agent.setup(msg)
        freeze_heap()

    def on_point(msg: Assignment, node: str) -> None:
        agent.assign(msg)

    def on_stop_point(msg: StopPoint, node: str) -> None:
        agent.stop_point(msg.point)

    messages.listen(runner, Setup, on_setup, on_error=fatal)
    messages.listen(runner, Assignment, on_point, on_error=fatal)
    messages.listen(runner, StopPoint, on_stop_point, on_error=fatal)
    send(Listening(worker=name))  # only now: a Setup that came before its handler would be dropped
    runner.greenlet.join()
    agent.stop()


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
