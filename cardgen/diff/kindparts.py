"""How ``cardgen diff`` resamples a kind's points: the diff stage's half of the kind interface.

A kind whose requests are not independent samples (a closed loop's users share the server's steps; a batch's
requests run as one) names a :class:`KindDiff` (``Kind.diff``, ``"module:attribute"``, in its folder). The diff
asks it for a point's requests in send order with their resampling units (requests of one unit are drawn
together), for what those units are called, and whether the point's throughput is a figure of its requests
(resampled with them) or of its load (no interval). Every other kind's points are resampled request by request,
their throughput the offered load's.

    Kind.diff ──> KindDiff(requests, unit, throughput)
    units(rows, point) -> (rows, labels)      unit(point) -> "rounds"      throughput(point) -> None | why not
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cardgen.kinds import kind_of
from cardgen.kinds.kind import part
from cardgen.schemas.summary import ScenarioSummary


def _each(rows: pd.DataFrame, s: ScenarioSummary) -> tuple[pd.DataFrame, np.ndarray]:
    return rows, np.arange(len(rows))


def _load(s: ScenarioSummary) -> str | None:
    return f"{s.kind} point: its throughput follows the offered load, not a sample of requests"


@dataclass(frozen=True)
class KindDiff:
    """How a kind's points are resampled (see the module)."""

    # a point's counted requests (successful, no warm-up) -> those its figures come from, in send order, and each
    # one's resampling unit (requests with the same label are drawn together)
    requests: Callable[[pd.DataFrame, ScenarioSummary], tuple[pd.DataFrame, np.ndarray]] = _each
    unit: Callable[[ScenarioSummary], str] = lambda s: "requests"  # what is resampled, in words (plural)
    # None: its throughput is resampled with its requests (total output tokens / total E2E, scaled to the
    # point's); else why it has no interval
    throughput: Callable[[ScenarioSummary], str | None] = _load


PER_REQUEST = KindDiff()


def kind_diff(s: ScenarioSummary) -> KindDiff:
    """The resampling of ``s``'s kind (:data:`PER_REQUEST` for a kind that names none)."""
    ref = kind_of(s).diff
    return part(ref) if ref is not None else PER_REQUEST
