"""The options ``build`` and ``resume`` share: how to reach the server and run the load, and the GPUs asked for.
Plain click: importing this imports nothing that a load over HTTP must import after Locust."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

import click

from cardgen.buildconfig import LoadOptions, worker_count
from cardgen.errors import UsageError
from cardgen.urls import check_url

F = TypeVar("F", bound=Callable[..., Any])


def server_options(*, workers_default: int | None) -> Callable[[F], F]:
    """The options that say how to reach the server and run the load: the same for ``build`` and ``resume``
    (``workers_default`` None). ``resume``'s load options default to None, "as the run did": :func:`as_the_run_did`
    fills them in from the run's saved build config, so a run through workers on other machines resumes through
    them with no flag given again."""
    resumed = workers_default is None
    as_run = " [default: as the run did]" if resumed else ""
    options = [
        click.option("--url", help="Base URL of a running OpenAI-compatible server (e.g. http://127.0.0.1:8000)."),
        click.option("--api-key", envvar="CARDGEN_API_KEY", help="Bearer token for the server (or CARDGEN_API_KEY)."),
        click.option("--workers", default=None if workers_default is None else str(workers_default),
                     show_default=workers_default is not None, metavar="N|auto",
                     help="Locust worker processes (0 = one process; auto = as many as the busiest point needs, "
                          "up to the cores). Spread load when the client is the bottleneck."
                          + as_run),
        click.option("--remote-workers/--local-workers", default=None if resumed else False,
                     help="Wait for --workers started on other machines (`cardgen worker --master-host THIS_HOST`) "
                          "instead of starting them here." + as_run),
        click.option("--master-bind", default=None if resumed else "127.0.0.1", show_default=not resumed,
                     help="Address the Locust master binds." + as_run),
        click.option("--master-port", type=int, default=None if resumed else 0,
                     help="Port the Locust master binds (0 = any free port)." + as_run),
        click.option("--low-latency/--no-low-latency", default=None if resumed else False,
                     help="Hold this machine's CPUs (and each load worker's) out of their idle states while the load "
                          "runs (/dev/cpu_dma_latency at 0 us, as cyclictest does; needs root), so that sends leave "
                          "on time where waking an idle CPU is slow (virtual machines: 1-3 ms). It is the whole "
                          "machine's: a server on it runs so too." + as_run),
        click.option("--engine", help="With a server: its engine (vllm, sglang, tgi, llamacpp, openai) instead of "
                     "detecting it, or an engine profile (vllm-0.6 ...) that also sets its cost plan's. Without: the "
                     "virtual server's engine profile (vllm, vllm-0.6, vllm-0.4, sglang, tgi; default vllm)."),
        click.option("--launch", type=click.Choice(["vllm", "sglang", "tgi", "llamacpp"]),
                     help="Start this engine on loopback, measure it, stop it."),
        click.option("--engine-args", default="", help="Extra arguments for --launch, as one string."),
        click.option("--gpu-metrics-url", help="A DCGM exporter's /metrics URL, for GPU telemetry when the server "
                     "is on another host (a local server's GPUs are read through NVML)."),
        click.option("--scrape-interval", type=float, default=None if resumed else 0.5, show_default=not resumed,
                     help="Seconds between /metrics scrapes (at least 0.1)." + as_run),
        click.option("--run-saturated", is_flag=True, help="Run every parallel count, also those larger than "
                     "one that saturated the server (skipped by default)."),
        click.option("--no-card", is_flag=True, help="Measure only: write the raw files, not the card."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]

    def apply(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


AS_THE_RUN_DID = {"remote_workers": "remote_workers", "master_bind": "master_bind", "master_port": "master_port",
                  "scrape_interval": "scrape_interval_s", "gpu_metrics_url": "gpu_metrics_url",
                  "low_latency": "low_latency"}


def as_the_run_did(params: Mapping[str, Any], saved: LoadOptions | None) -> dict[str, Any]:
    """``resume``'s options with each load option not given (None) taken from ``saved``, the load options the run
    was built with (run.json's build config; None, a run.json from before cardgen saved one: the defaults)."""
    saved = saved or LoadOptions()
    return {**params, **{option: getattr(saved, field) for option, field in AS_THE_RUN_DID.items()
                         if params.get(option) is None}}


def parse_load(params: Mapping[str, Any], *, workers: int | Literal["auto"] | None) -> LoadOptions:
    """The options of :func:`server_options` that say how the load runs, as ``build`` and ``resume`` share them,
    with ``workers`` as :func:`check_server_options` parsed it (it checks them all, before anything heavy loads)."""
    return LoadOptions(workers=workers, remote_workers=params["remote_workers"],
                       master_bind=params["master_bind"], master_port=params["master_port"],
                       scrape_interval_s=params["scrape_interval"], gpu_metrics_url=params["gpu_metrics_url"],
                       run_saturated=params["run_saturated"], low_latency=params["low_latency"])


def check_server_options(*, url: str | None, launch: str | None, gpu_metrics_url: str | None, workers: int | str,
                         scrape_interval: float, remote_workers: bool = False,
                         ) -> tuple[str | None, int | Literal["auto"]]:
    """One-line errors for options that cannot work, before any server starts (and before the load engine is
    imported: a bad URL is said in a fraction of a second): the one check of these options, as the command line
    is parsed. The server's base URL (:func:`cardgen.urls.check_url`; None: none given) and the parsed
    ``--workers``."""
    if url and launch:
        raise UsageError("give either --url (a running server) or --launch (start one), not both")
    base = check_url(url) if url else None
    if gpu_metrics_url:
        check_url(gpu_metrics_url)
    if scrape_interval < 0.1:
        raise UsageError("--scrape-interval must be at least 0.1 s: scraping faster loads the server you measure")
    count = worker_count(workers, remote_workers=remote_workers)
    return base, count


REAL_TIME_OPTIONS = frozenset({"url", "api_key", "workers", "remote_workers", "master_bind", "master_port",
                               "engine_args", "gpu_metrics_url", "scrape_interval", "low_latency"})


def parse_gpus(gpu: str) -> list[str]:
    """``--gpu``: one GPU, or several comma-separated (each a preset or a GPU file)."""
    gpus = [g.strip() for g in gpu.split(",")]
    if not all(gpus):
        raise UsageError(f"--gpu {gpu!r} names an empty GPU: give presets or files separated by commas")
    if len(set(gpus)) < len(gpus):
        raise UsageError(f"--gpu {gpu!r} names a GPU twice")
    return gpus
