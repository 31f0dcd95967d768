"""How ``cardgen diff`` resamples a batch-table point (:data:`DIFF`): by round (a batch's requests run as one, so
they are drawn together)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cardgen.diff.kindparts import KindDiff
from cardgen.schemas.summary import ScenarioSummary


def _requests(rows: pd.DataFrame, s: ScenarioSummary) -> tuple[pd.DataFrame, np.ndarray]:
    return rows, rows["repeat"].fillna(-1).to_numpy()


DIFF = KindDiff(requests=_requests, unit=lambda s: "rounds")
