"""How ``cardgen diff`` resamples a kind's points: the diff stage's half of the kind interface.

A kind whose requests are not independent samples (a closed loop's users share the server's steps; a batch's
requests run as one) names a :class:`KindDiff` (``Kind.diff``, ``"module:attribute"``, in its folder). The diff
asks it for a point's requests in send order with their resampling units (requests of one unit are drawn
together), for what those units are called, and whether the point's throughput is a figure of its requests
(resampled with them) or of its load (no interval). Every other kind's points are resampled request by request,
their throughput the offered load's.

A kind whose points hold figures of their own beyond the common ones (a structured point's constrained and free
arms, which pooled would mean nothing) names them too: each a :class:`KindFigure` read from its result in
``summary.json``'s ``kinds``, with the requests it is a quantile of, so its interval is drawn as the common
figures' are; ``pooled=False`` leaves the common figures over all of a point's requests out.

    Kind.diff ──> KindDiff(requests, unit, throughput, figures, pooled)
    units(rows, point) -> (rows, labels)      unit(point) -> "rounds"      throughput(point) -> None | why not
    figures(point, its kind's result or None) -> [KindFigure(key, label, unit, better, value, rows, metric, q)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cardgen.kinds import kind_of
from cardgen.kinds.kind import part
from cardgen.schemas.summary import ScenarioSummary

HIGHER, LOWER = "higher", "lower"  # which way a figure is better


@dataclass(frozen=True)
class KindFigure:
    """One figure a kind's point has of its own: ``key`` (unique in the point: it matches the same figure of the
    same point in another run), its label, unit, which way is better (:data:`HIGHER` or :data:`LOWER`) and its
    value as the kind's analysis saved it. Its interval: the ``q`` quantile of column ``metric`` over the point's
    requests that ``rows`` selects (a mask over the rows :attr:`KindDiff.requests` gives), resampled in their
    units; with no ``rows``, it is one number and ``note`` says why it has no interval."""

    key: str
    label: str
    unit: str
    better: str
    value: float
    rows: Callable[[pd.DataFrame], np.ndarray] | None = None
    metric: str = ""
    q: float = 0.5
    note: str = ""


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
    # its points' own figures, from the point's row and the kind's result as summary.json keeps it (None: the run
    # has none)
    figures: Callable[[ScenarioSummary, Mapping[str, Any] | None], Sequence[KindFigure]] | None = None
    # whether the common figures over all of a point's requests are compared (False: its requests belong to arms
    # whose figures pooled would mean nothing; only its own figures are)
    pooled: bool = True


PER_REQUEST = KindDiff()


def kind_diff(s: ScenarioSummary) -> KindDiff:
    """The resampling of ``s``'s kind (:data:`PER_REQUEST` for a kind that names none)."""
    ref = kind_of(s).diff
    return part(ref) if ref is not None else PER_REQUEST
