"""How ``cardgen diff`` resamples a closed-loop point (:data:`DIFF`): its steady requests (the ramp and the drain
left out, as the card's figures) in rounds of its users, who share the server's steps, drawn together; its
throughput resampled with them where it reached a steady state."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cardgen.analysis.scenarios import steady_requests
from cardgen.diff import resample
from cardgen.diff.kindparts import KindDiff
from cardgen.schemas.summary import ScenarioSummary


def _requests(rows: pd.DataFrame, s: ScenarioSummary) -> tuple[pd.DataFrame, np.ndarray]:
    users = s.parallel or 1
    rows = steady_requests(rows, parallel=users)[0] if s.steady_state else rows.sort_values("sent_at")
    return rows, resample.rounds(len(rows), users)


DIFF = KindDiff(requests=_requests, unit=lambda s: "rounds" if (s.parallel or 1) > 1 else "requests",
                throughput=lambda s: None if s.steady_state else "too short for a steady state: no interval")
