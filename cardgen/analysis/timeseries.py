"""The server's ``/metrics`` scrapes as a time series, read through the engine's adapter.

Columns of :func:`server_timeseries`: ``t`` (Unix seconds, the middle of the scrape), ``kv_usage`` (fraction
0..1), ``running``, ``waiting``, ``preemptions`` (a counter). A gauge the server does not publish, or that its
adapter does not know (an unknown engine knows none), is NaN. Which sample says what is the adapter's
knowledge (:func:`cardgen.engines.load_gauges`, the ``preemptions`` counter of
:func:`cardgen.engines.metric_names`), never this module's: a new engine needs only its adapter.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from cardgen.engines import first_counter, load_gauges, metric_candidates
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
