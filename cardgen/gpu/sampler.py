"""The GPU sampler: a process of its own that appends one record per GPU every ``interval_s`` to
``gpu_metrics.jsonl`` while a run goes on.

It is a separate process (multiprocessing, *spawn* context) because NVML calls block in C and Locust's gevent
loop must never wait on them; spawn (not fork) so the child starts clean even when the parent has been
monkey-patched by gevent. This module imports neither locust nor gevent.

    sampler = start_gpu_sampler(run_dir)            # or dcgm_url="http://gpu-host:9400/metrics"
    try:
        run_load()
    finally:
        sampler.stop()
    run_info.gpu = sampler.describe()               # inventory, or {"telemetry": False, "reason": ...}
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from cardgen.gpu import nvml as nv
from cardgen.gpu.dcgm import parse_dcgm
from cardgen.gpu.summary import failed_sample
from cardgen.rundir import GPU_METRICS_JSONL

NO_TELEMETRY = "no GPU telemetry"


class GpuSampler:
    """Handle on a running (or never started) sampler. ``inventory`` is set when telemetry works, ``reason``
    says why not otherwise; nothing is invented when there is no GPU."""

    def __init__(self, path: Path, *, inventory: dict[str, Any] | None = None, reason: str | None = None,
                 process: Any = None, stop_event: Any = None) -> None:
        self.path = path
        self.inventory = inventory
        self.reason = reason
        self._process = process
        self._stop_event = stop_event

    @property
    def source(self) -> str | None:
        return (self.inventory or {}).get("source")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Take a last sample, then end the sampler process (terminated if it does not end in time)."""
        if self._process is None:
            return
        if self._stop_event is not None:
            self._stop_event.set()
        self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)
        self._process = None

    def describe(self) -> dict[str, Any]:
        """What ``run.json``'s ``gpu`` holds: the inventory with ``telemetry: true``, or the reason."""
        if self.inventory is not None:
            return {"telemetry": True, **self.inventory}
        return {"telemetry": False, "reason": self.reason or NO_TELEMETRY}

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_gpu_sampler(run_dir: Path, *, interval_s: float = 0.5, dcgm_url: str | None = None,
                      nvml_module: str = "pynvml", startup_timeout_s: float = 20.0) -> GpuSampler:
    """Start sampling the local GPUs through NVML, or a remote host's through its DCGM exporter
    (``dcgm_url``), into ``run_dir/gpu_metrics.jsonl``. Never raises for a missing GPU: the returned
    sampler's ``reason`` says what is missing. ``nvml_module`` names the NVML module to import (tests pass a
    stand-in that is importable from ``sys.path``)."""
    path = Path(run_dir) / GPU_METRICS_JSONL
    absent = None if dcgm_url else nv.nvml_absent(nvml_module)
    if absent is not None:  # no process to spawn (about a second, importing cardgen) only to say so
        return GpuSampler(path, reason=absent)
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    stop_event = ctx.Event()
    process = ctx.Process(target=run_sampler, name="cardgen-gpu-sampler", daemon=True,
                          args=(str(path), float(interval_s), dcgm_url, nvml_module, sender, stop_event))
    process.start()
    sender.close()
    message: dict[str, Any]
    if receiver.poll(startup_timeout_s):
        try:
            message = receiver.recv()
        except EOFError:
            message = {"reason": f"{NO_TELEMETRY}: the GPU sampler ended before it reported"}
    else:
        message = {"reason": f"{NO_TELEMETRY}: the GPU sampler did not start within {startup_timeout_s:.0f} s"}
    receiver.close()
    if message.get("inventory") is None:
        stop_event.set()
        process.join(5)
        if process.is_alive():
            process.terminate()
            process.join(5)
        return GpuSampler(path, reason=message.get("reason") or NO_TELEMETRY)
    return GpuSampler(path, inventory=message["inventory"], process=process, stop_event=stop_event)


# --- the child process -------------------------------------------------------------------------------


def run_sampler(path: str, interval_s: float, dcgm_url: str | None, nvml_module: str, conn: Any,
                stop_event: Any) -> None:
    """The sampler process' main: report the inventory (or the reason there is none) once through ``conn``,
    then sample until ``stop_event`` is set, and once more after."""
    if dcgm_url:
        take, first, close = _dcgm_source(dcgm_url)
    else:
        take, first, close = _nvml_source(nvml_module)
    try:
        if "reason" in first:
            conn.send(first)
            return
        conn.send({"inventory": first["inventory"]})
        conn.close()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            _write(fh, first.get("records") or take())
            while not stop_event.wait(interval_s):
                _write(fh, take())
            _write(fh, take())  # the counters' values at the end of the run
    finally:
        close()


def _write(fh: Any, records: list[dict[str, Any]]) -> None:
    for record in records:
        fh.write(json.dumps(record) + "\n")
    fh.flush()


def _nvml_source(module: str) -> tuple[Any, dict[str, Any], Any]:
    lib, reason = nv.load_nvml(module)
    if lib is None:
        return (lambda: []), {"reason": reason}, (lambda: None)
    try:
        inv = nv.inventory(lib)
        handles = nv.handles(lib)
    except Exception as exc:  # NVMLError types are made at run time
        nv.shutdown(lib)
        return (lambda: []), {"reason": f"{NO_TELEMETRY}: {nv.nvml_reason(lib, exc)}"}, (lambda: None)
    return (lambda: nv.sample(lib, handles)), {"inventory": inv}, (lambda: nv.shutdown(lib))


def _dcgm_source(url: str) -> tuple[Any, dict[str, Any], Any]:
    import requests  # noqa: PLC0415  only a remote GPU's sampler needs HTTP: the NVML one starts without it

    session = requests.Session()

    def scrape() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        sent = time.time()
        resp = session.get(url, timeout=5)
        resp.raise_for_status()
        return parse_dcgm(resp.text, t=sent)

    def take() -> list[dict[str, Any]]:
        sent = time.time()
        try:
            records = scrape()[1]
        except Exception as exc:  # a missed scrape leaves a gap, not a crash, and is counted
            return [failed_sample(sent, "dcgm", f"{type(exc).__name__}: {exc}")]
        return records or [failed_sample(sent, "dcgm", "EmptyScrape: the exporter listed no GPU")]

    try:
        inv, records = scrape()
    except Exception as exc:
        return take, {"reason": f"{NO_TELEMETRY}: DCGM exporter at {url} did not answer: {type(exc).__name__}"}, \
            session.close
    if not records:
        return take, {"reason": f"{NO_TELEMETRY}: DCGM exporter at {url} lists no GPU"}, session.close
    inv["url"] = url
    return take, {"inventory": inv, "records": records}, session.close
