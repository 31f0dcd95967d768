"""Each load worker's path to the server, against the others' (summary.json ``load_workers``).

Where a run's load came from more than one worker process (``--workers N``, ``cardgen worker`` on other hosts),
every point's requests are shared among them, so each worker's requests and the others' met the same server at the
same load. A worker whose requests waited longer for their first token than the others' did on the same points
reaches the server by a slower path (a longer route, a busy host, a proxy): its requests' latencies include that
path, and so do the point's figures.

Method: each successful request's TTFT minus the quickest other worker's median TTFT on the same point (the lowest
of the other workers' medians there, over their successful requests; points where another worker has one); a
worker's excess is the median of those differences, with a bootstrap 95 % interval. Against the quickest other
worker rather than all of them, so that one slow worker does not make the others look quick. A worker is **slower**
when that interval lies wholly above both :data:`SLOWER_MIN_S` and :data:`SLOWER_SHARE` of the reference TTFT over
the same points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cardgen.analysis.stats import describe
from cardgen.schemas.summary import WorkerPath

SLOWER_MIN_S = 0.005  # a slower path adds at least this much to the first token...
SLOWER_SHARE = 0.10  # ... and at least this share of the others' median TTFT


def worker_paths(requests: pd.DataFrame) -> list[WorkerPath]:
    """Every worker's excess TTFT against the quickest other worker on the same points, in the order they first sent (none when
    one process sent the whole run)."""
    if requests.empty or "worker" not in requests or requests["worker"].nunique() < 2:
        return []
    ok = requests[requests["ok"] & ~requests["warmup"] & np.isfinite(requests["ttft_s"].to_numpy(dtype=float))]
    out = []
    for worker in requests["worker"].drop_duplicates():
        sent = requests[requests["worker"] == worker]
        deltas: list[np.ndarray] = []
        others_median: list[float] = []
        for _, point in ok.groupby("scenario", sort=False):
            mine = point.loc[point["worker"] == worker, "ttft_s"].to_numpy(dtype=float)
            theirs = point.loc[point["worker"] != worker].groupby("worker", sort=False)["ttft_s"].median()
            if len(mine) and len(theirs):
                median = float(theirs.min())  # the quickest other worker's on this point
                deltas.append(mine - median)
                others_median += [median] * len(mine)
        excess = describe(np.concatenate(deltas)) if deltas else None
        bar = max(SLOWER_MIN_S, SLOWER_SHARE * float(np.median(others_median))) if others_median else None
        slower = (excess is not None and bar is not None and excess.p50_ci_low is not None
                  and excess.p50_ci_low > bar)
        out.append(WorkerPath(
            worker=str(worker), requests=len(sent), compared=excess.n if excess is not None else 0,
            ttft_excess_s=excess.p50 if excess is not None else None,
            ttft_excess_ci_low=excess.p50_ci_low if excess is not None else None,
            ttft_excess_ci_high=excess.p50_ci_high if excess is not None else None,
            others_ttft_s=float(np.median(others_median)) if others_median else None, slower_bar_s=bar,
            slower=slower))
    return out


def slower_warnings(paths: list[WorkerPath]) -> list[str]:
    """summary.warnings' words for each slower worker."""
    return [f"load worker {p.worker} reaches the server by a slower path: its requests' TTFT is "
            f"{(p.ttft_excess_s or 0) * 1e3:.1f} ms (95 % interval {(p.ttft_excess_ci_low or 0) * 1e3:.1f} to "
            f"{(p.ttft_excess_ci_high or 0) * 1e3:.1f} ms) above the quickest other worker's on the same points, so the "
            "figures of the points it took part in include that path" for p in paths if p.slower]
