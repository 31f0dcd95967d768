"""The recorder: appends every finished request to ``requests.jsonl`` the moment it arrives.

It subscribes to records (from Locust's ``request`` event locally, from worker messages in distributed
mode) and fails loudly: Locust swallows exceptions raised in listeners, so the recorder keeps the first
failure, calls ``on_fatal`` (which stops the run) and the run ends with an error instead of silently
losing data.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cardgen.rundir import LOADGEN_JSONL, REQUESTS_JSONL

log = logging.getLogger("cardgen.load")


def _finite(data: dict[str, Any]) -> dict[str, Any]:
    """Top-level inf/NaN floats (an all-at-once rate) as the strings "Infinity"/"NaN": JSON has no such
    numbers, and pydantic reads the strings back as floats."""
    out = data
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            if out is data:
                out = dict(data)
            out[key] = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return out


class Recorder:
    def __init__(self, run_dir: Path, *, on_fatal: Callable[[BaseException], None]) -> None:
        self.run_dir = Path(run_dir)
        self.on_fatal = on_fatal
        self.fatal: BaseException | None = None
        self._requests = (self.run_dir / REQUESTS_JSONL).open("a", encoding="utf-8")
        self._loadgen = (self.run_dir / LOADGEN_JSONL).open("a", encoding="utf-8")
        self.total = 0
        self.failed = 0
        self.failures_by_kind: Counter[str] = Counter()
        self.length_mismatches = 0
        self.by_point: Counter[str] = Counter()
        self.output_tokens_by_point: Counter[str] = Counter()
        self.failed_by_point: Counter[str] = Counter()
        # the load generator measuring itself, for run.json's percentiles (no need to re-read the files)
        self.send_lags_s: list[float] = []  # open loop: actual - scheduled send time
        self.loop_lags_s: list[float] = []
        self.cpu_percents: list[float] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def _fail(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            log.error("cardgen recorder failed: %s", exc)
            self.on_fatal(exc)

    def record(self, data: dict[str, Any]) -> None:
        """Append one request record (a RequestRecord as JSON-able dict). Never raises."""
        try:
            self._requests.write(json.dumps(_finite(data), separators=(",", ":"), allow_nan=False) + "\n")
            self._requests.flush()
            self.total += 1
            point = data.get("scenario", "?")
            self.by_point[point] += 1
            if data.get("scheduled_at") is not None:
                self.send_lags_s.append(max(0.0, float(data["sent_at"]) - float(data["scheduled_at"])))
            if data.get("error") is not None:
                self.failed += 1
                self.failed_by_point[point] += 1
                self.failures_by_kind[str(data.get("error_kind") or "unknown")] += 1
            else:
                out = data.get("output_tokens")
                self.output_tokens_by_point[point] += int(out or 0)
                if out is not None and out != data.get("output_tokens_target"):
                    self.length_mismatches += 1
            for listener in self.listeners:
                listener(data)
        except Exception as exc:  # noqa: BLE001 - fail loudly, see the module docstring
            self._fail(exc)

    def loadgen(self, data: dict[str, Any]) -> None:
        try:
            self._loadgen.write(json.dumps(data, separators=(",", ":")) + "\n")
            self._loadgen.flush()
            self.loop_lags_s.append(float(data["loop_lag_s"]))
            if data.get("cpu_percent") is not None:
                self.cpu_percents.append(float(data["cpu_percent"]))
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def on_request_event(self, context: dict[str, Any] | None = None, **_: Any) -> None:
        """Locust ``request`` listener (local runner): the record rides in ``context['record']``."""
        rec = (context or {}).get("record")
        if rec is None:
            self._fail(RuntimeError("a request reached the recorder without its record"))
            return
        self.record(rec.model_dump(mode="json"))

    def close(self) -> None:
        for fh in (self._requests, self._loadgen):
            try:
                fh.flush()
                fh.close()
            except OSError as exc:
                self._fail(exc)
