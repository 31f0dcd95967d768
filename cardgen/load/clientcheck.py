"""Whether the load generator kept up: each point's verdict (:func:`cardgen.load.workers.client_verdict` on the
samples every process took while it ran) and the run's percentiles of event-loop lag, send lag and CPU, with
the warnings run.json and the card give when the client, not the server, was the bottleneck."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from cardgen.kinds import kind_of
from cardgen.load.workers import CPU_LIMIT_PERCENT, LOOP_LAG_LIMIT_S, SEND_LAG_LIMIT_S, client_verdict
from cardgen.recorder import Recorder
from cardgen.schemas.run import PointOutcome

LOOP_LAG_WARN_S = LOOP_LAG_LIMIT_S
SEND_LAG_WARN_S = SEND_LAG_LIMIT_S
CPU_WARN_PERCENT = CPU_LIMIT_PERCENT


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _judged(point: PointOutcome) -> bool:
    """Whether the client's timings matter to ``point``: it ran, and its kind's figures are the client's timings
    (``Kind.client_timed``)."""
    return kind_of(point).client_timed and point.started_unix is not None


def _during(point: PointOutcome, times: Sequence[float], values: Sequence[float]) -> list[float]:
    """The load generator's samples taken while ``point`` ran (to now, when it was cut off)."""
    assert point.started_unix is not None
    start, end = point.started_unix, point.ended_unix if point.ended_unix is not None else math.inf
    return [v for t, v in zip(times, values, strict=True) if start <= t <= end]


def judge_client(recorder: Recorder, point: PointOutcome) -> PointOutcome:
    """``point`` with whether the load generator kept up while it ran (:func:`client_verdict` on the samples of
    every process taken between its start and end)."""
    if not _judged(point):
        return point
    kept_up, words = client_verdict(loop_lags_s=_during(point, recorder.loop_lag_times, recorder.loop_lags_s),
                                    cpu_percents=_during(point, recorder.cpu_times, recorder.cpu_percents),
                                    send_lags_s=recorder.send_lags_by_point.get(point.name, []))
    return point.model_copy(update={"client_kept_up": kept_up, "client": words})


def loadgen_report(recorder: Recorder, points: Sequence[PointOutcome] = ()) -> tuple[dict[str, Any], list[str]]:
    """Percentiles of event-loop lag, send lag and CPU, and warnings when the client was the bottleneck: per
    point, the verdict :func:`judge_client` gave it (``points`` are judged); without points, the whole run's."""
    lags, cpus, send_lags = recorder.loop_lags_s, recorder.cpu_percents, recorder.send_lags_s
    report = {
        "loop_lag_p50_s": _pct(lags, 50), "loop_lag_p95_s": _pct(lags, 95), "loop_lag_p99_s": _pct(lags, 99),
        "loop_lag_max_s": max(lags, default=None),
        "send_lag_p50_s": _pct(send_lags, 50), "send_lag_p99_s": _pct(send_lags, 99),
        "cpu_percent_p50": _pct(cpus, 50), "cpu_percent_max": max(cpus, default=None),
        "samples": len(lags),
    }
    warnings = []
    behind = [f"{p.name} ({p.client})" for p in points if p.client_kept_up is False] if points else None
    if behind:
        warnings.append(f"the load generator fell behind during {len(behind)} point(s), whose client-side timings "
                        f"may be late: {'; '.join(behind)}; use --workers N to spread the load, or a machine where "
                        "the server does not share the cores")
    elif behind is None and report["loop_lag_p95_s"] is not None and report["loop_lag_p95_s"] > LOOP_LAG_WARN_S:
        warnings.append(f"the load generator's event loop stalled over {report['loop_lag_p95_s'] * 1000:.0f} ms in "
                        "more than 1 second in 20: client-side timings may be late; use --workers N to spread "
                        "the load")
    if report["send_lag_p99_s"] is not None and report["send_lag_p99_s"] > SEND_LAG_WARN_S:
        warnings.append(f"open-loop requests left {report['send_lag_p99_s'] * 1000:.0f} ms (p99) after their "
                        "scheduled time: the client, not the server, limited the arrival rate")
    if report["cpu_percent_max"] is not None and report["cpu_percent_max"] > CPU_WARN_PERCENT:
        warnings.append(f"a load-generator process used {report['cpu_percent_max']:.0f} % of a core: the client may "
                        "be the bottleneck; use --workers N")
    return report, warnings
