"""A Locust worker process: ``python -m cardgen.load.worker --master-host H --master-port P --url URL``.

Started by the master (``cardgen build --workers N``) on this host, or by hand on other machines
(``cardgen worker``). Its agent runs the share of each point the master assigns and ships every record to
the master as soon as it ends.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import gevent
from locust.env import Environment

from cardgen.load.agent import Agent, CardgenUser


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
    env = Environment(user_classes=[CardgenUser], host=url)
    runner_box: dict[str, Any] = {}

    def emit(kind: str, data: dict[str, Any]) -> None:
        runner_box["runner"].send_message(f"cardgen_{kind}", data)

    agent = Agent(worker=name, emit=emit)
    env.cardgen_agent = agent  # type: ignore[attr-defined]

    def on_request(context: dict[str, Any] | None = None, **_: Any) -> None:
        rec = (context or {}).get("record")
        if rec is None:
            raise RuntimeError("a request reached the worker's recorder without its record")
        runner_box["runner"].send_message("cardgen_record", rec.model_dump(mode="json"))

    env.events.request.add_listener(on_request)
    runner = env.create_worker_runner(master_host, master_port)
    runner_box["runner"] = runner

    def on_setup(environment: Any, msg: Any, **_: Any) -> None:
        agent.worker = str(msg.data.get("name") or agent.worker)
        agent.setup(msg.data)

    def on_point(environment: Any, msg: Any, **_: Any) -> None:
        agent.assign(msg.data["point"], index=int(msg.data["index"]), parts=int(msg.data["parts"]))

    runner.register_message("cardgen_setup", on_setup)
    runner.register_message("cardgen_point", on_point)
    runner.greenlet.join()


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
