"""``cardgen worker``: a Locust load worker for ``cardgen build --workers N --remote-workers`` elsewhere."""

from __future__ import annotations

import socket

import click

from cardgen.load.worker import run_worker


@click.command("worker")
@click.option("--master-host", required=True, help="Host of the machine running `cardgen build --remote-workers`.")
@click.option("--master-port", type=int, required=True, help="The port that `cardgen build` printed.")
@click.option("--url", required=True, help="The server URL, as reachable from this machine.")
@click.option("--name", default=None, help="A name for this worker in the records.")
def worker(master_host: str, master_port: int, url: str, name: str | None) -> None:
    """Run load for a cardgen master until it says stop."""

    run_worker(master_host=master_host, master_port=master_port, url=url, name=name or socket.gethostname())
