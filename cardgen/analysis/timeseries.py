"""The server's ``/metrics`` scrapes as a time series, read through the engine's adapter.

Columns of :func:`server_timeseries`: ``t`` (Unix seconds, the middle of the scrape), ``kv_usage`` (fraction
0..1), ``running``, ``waiting``, ``preemptions`` (a counter). A gauge the server does not publish, or that its
adapter does not know (an unknown engine knows none), is NaN. Which sample says what is the adapter's
knowledge (:func:`cardgen.engines.load_gauges`, the ``preemptions`` counter of
:func:`cardgen.engines.metric_names`), never this module's: a new engine needs only its adapter. Over a window of
requests: :func:`counter_growth` (a counter of the engine's, by role, from the scrape before to the scrape after)
and :func:`gauge_mean`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen.engines import counter, first_counter, load_gauges, metric_candidates, metric_names
from cardgen.schemas.records import MetricSample

COLUMNS = ("t", "kv_usage", "running", "waiting", "preemptions")


def server_timeseries(samples: Iterable[MetricSample], *, engine: str | None) -> pd.DataFrame:
    """One row per successful scrape, in time order. ``engine`` is ``run.json``'s ``server.engine``. Counts are
    summed over label sets (engines, models); how the KV usage fraction combines them is the adapter's call."""
    preemptions = metric_candidates(engine, "preemptions")
    rows = []
    for s in samples:
        if s.error is not None or not s.samples:
            continue
        gauges = load_gauges(engine, s)
        rows.append({
            "t": (s.t + s.t_end) / 2 if s.t_end is not None else s.t,
            "kv_usage": gauges["usage"],
            "running": gauges["running"],
            "waiting": gauges["waiting"],
            "preemptions": first_counter(s, preemptions),
        })
    df = pd.DataFrame(rows, columns=list(COLUMNS), dtype=float)
    return df.sort_values("t", kind="stable").reset_index(drop=True)


def window(ts: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """The scrapes taken between ``start`` and ``end`` (inclusive)."""
    if ts.empty:
        return ts
    return ts[(ts["t"] >= start) & (ts["t"] <= end)]


def counter_increase(ts: pd.DataFrame, column: str, start: float, end: float) -> float | None:
    """How much a counter rose between the last scrape at or before ``start`` (or the first after it) and the
    last scrape at or before ``end``. None when the server does not publish it."""
    if ts.empty or ts[column].isna().all():
        return None
    valid = ts[ts[column].notna()]
    t = valid["t"].to_numpy()
    v = valid[column].to_numpy()
    i0 = max(int(np.searchsorted(t, start, side="right")) - 1, 0)
    i1 = int(np.searchsorted(t, end, side="right")) - 1
    if i1 < i0:
        return 0.0
    return float(max(v[i1] - v[i0], 0.0))



@dataclass(frozen=True)
class Reading:
    """A figure read from the server's scrapes over a window: its ``value`` and the sample ``name`` it was read
    from (what the card says it was read from)."""

    value: float
    name: str


def _name(engine: str | None, role: str) -> str:
    return metric_names(engine).get(role, "")


def counter_growth(metrics: Sequence[MetricSample], *, engine: str | None, role: str, start: float,
                   end: float) -> Reading | None:
    """How much the engine's counter of ``role`` (:func:`cardgen.engines.metric_names`) grew from the last scrape
    that ended before ``start`` to the first taken after ``end``: every scrape taken during the window's requests
    falls inside. None where the engine has no such counter, a scrape is missing either side, or lacks it."""
    name = _name(engine, role)
    if not name:
        return None
    ok = [m for m in metrics if m.error is None]
    before = [m for m in ok if (m.t_end or m.t) <= start]
    after = [m for m in ok if m.t >= end]
    if not before or not after:
        return None
    a, b = counter(before[-1], name), counter(after[0], name)
    return None if a is None or b is None else Reading(b - a, name)


def gauge_mean(metrics: Sequence[MetricSample], *, engine: str | None, role: str, start: float,
               end: float) -> Reading | None:
    """The mean of the engine's gauge of ``role`` over the scrapes taken from ``start`` to ``end`` (those that
    have it); None where the engine has no such gauge or no scrape in the window has it."""
    name = _name(engine, role)
    if not name:
        return None
    values = [counter(m, name) for m in metrics if m.error is None and start <= m.t <= end]
    present = [v for v in values if v is not None]
    return Reading(float(np.mean(present)), name) if present else None
