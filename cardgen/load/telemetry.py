"""What the load stage reads beside the load: the server's GPUs (NVML on this host, a DCGM exporter on another),
and whether the server exposes Prometheus ``/metrics`` at all."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests

from cardgen.gpu import start_gpu_sampler


def is_local(base: str) -> bool:
    host = (urlparse(base).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


@contextmanager
def gpu_telemetry(base: str, run_dir: Path, *, gpu: Mapping[str, Any], modelled: bool,
                  gpu_metrics_url: str | None) -> Iterator[dict[str, Any]]:
    """Sample the server's GPUs while the load runs: NVML when the server is on this machine, the DCGM
    exporter at ``gpu_metrics_url`` otherwise. Yields what run.json's ``gpu`` holds (``gpu``, with the inventory
    or the reason there is none). Nothing for a modelled run: its GPU is modelled, not there."""
    if modelled:
        yield dict(gpu)
        return
    if gpu_metrics_url is None and not is_local(base):
        yield {**gpu, "telemetry": False, "reason": "no GPU telemetry: the server is on another host; give "
                                                    "--gpu-metrics-url with its DCGM exporter's /metrics"}
        return

    sampler = start_gpu_sampler(run_dir, dcgm_url=gpu_metrics_url)
    try:
        said = sampler.describe()
        # what the telemetry read beats what the user said; the user's name stays where it read none
        yield {**gpu, **said, **({"name_source": None} if said.get("name") else {})}
    finally:
        sampler.stop()


def metrics_available(base: str, headers: Mapping[str, str]) -> bool:
    try:
        resp = requests.get(f"{base}/metrics", headers=dict(headers), timeout=5)
    except requests.RequestException:
        return False
    return resp.status_code == 200 and "# TYPE" in resp.text[:100_000]
