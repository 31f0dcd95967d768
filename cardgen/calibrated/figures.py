"""The figures a calibration fits and checks, read off the analysis the card is made from.

Per point: the medians of speed from start, decode speed and TTFT, and the total output throughput
(:data:`cardgen.schemas.calibration.FIGURES`), as :func:`cardgen.analysis.scenarios.summarise_scenario` computes
them for the card, measured or in virtual time alike. Per ingestion sweep: the median TTFT at each prompt length
(``ttft_s@N``). Errors are relative: predicted / measured - 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from cardgen.analysis.options import AnalysisOptions
from cardgen.analysis.requests import chunk_gaps, request_frame
from cardgen.analysis.scenarios import scenario_summaries
from cardgen.kinds import INGESTION, kind_of
from cardgen.schemas.calibration import FIGURES, FigureValues
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.summary import ScenarioSummary

INGEST_FIGURE = "ttft_s@{}"  # the ingestion sweep's median TTFT at a prompt length
NO_SERVER = pd.DataFrame()  # no /metrics in a virtual evaluation: the figures compared do not use them


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) and value > 0 else None


def figure_values(s: ScenarioSummary) -> FigureValues:
    """The compared figures of one analysed point (None where it has none, or a figure is not positive)."""
    return FigureValues(speed_from_start_tok_s=_finite(s.speed_from_start_tok_s.p50),
                        decode_tok_s=_finite(s.decode_tok_s.p50), ttft_s=_finite(s.ttft_s.p50),
                        output_tok_s=_finite(s.output_tok_s))


def errors(predicted: FigureValues, measured: FigureValues) -> FigureValues:
    """predicted / measured - 1, figure by figure (None where either is missing)."""
    out = {}
    for name, m in measured.named():
        p = getattr(predicted, name)
        out[name] = p / m - 1.0 if p is not None and m is not None else None
    return FigureValues(**out)


def worst(err: FigureValues) -> float | None:
    """The largest relative error of a point, in absolute value."""
    values = [abs(v) for _, v in err.named() if v is not None]
    return max(values) if values else None


def ingest_ttft(frame: pd.DataFrame, point: str) -> dict[int, float]:
    """The ingestion sweep ``point``'s median TTFT per prompt length (the target length), successful requests."""
    rows = frame[(frame["scenario"] == point) & frame["ok"]] if len(frame) else frame
    if rows.empty:
        return {}
    medians = rows.groupby("prompt_tokens_target")["ttft_s"].median()
    return {int(n): float(v) for n, v in medians.items() if math.isfinite(v) and v > 0}


BURST_GAP_S = 0.0002  # two text chunks this close arrived in one read: the server sent them together
BURSTY_SHARE = 0.5  # a point whose gaps are mostly that close had its text delivered in bursts


def burst_share(frame: pd.DataFrame, point: str) -> float | None:
    """The share of ``point``'s gaps between text chunks under :data:`BURST_GAP_S` (None without gaps)."""
    gaps = chunk_gaps(frame[frame["scenario"] == point]) if len(frame) else np.empty(0)
    return float((gaps < BURST_GAP_S).mean()) if len(gaps) else None


def bursty_points(frame: pd.DataFrame) -> dict[str, float]:
    """The points whose text arrived mostly in bursts (share of near-zero gaps above :data:`BURSTY_SHARE`):
    their TTFT and decode speed time the server's streaming, not its engine's steps."""
    out = {}
    for point in dict.fromkeys(frame["scenario"]) if len(frame) else ():
        share = burst_share(frame, point)
        if share is not None and share > BURSTY_SHARE:
            out[str(point)] = share
    return out


def point_figures(frame: pd.DataFrame, ts: pd.DataFrame = NO_SERVER,
                  options: AnalysisOptions | None = None) -> dict[str, dict[str, float]]:
    """Every point's figures from a request frame: ``{point: {figure: value}}``, the four of :data:`FIGURES`
    for each point but an ingestion sweep, whose figures are its median TTFT per prompt length."""
    options = options or AnalysisOptions()
    out: dict[str, dict[str, float]] = {}
    if frame.empty:
        return out
    for s in scenario_summaries(frame, ts, slo_ttft_s=options.slo_ttft_s, slo_tpot_s=options.slo_tpot_s):
        kind = kind_of(s)
        if INGESTION in kind.headlines:
            out[s.scenario] = {INGEST_FIGURE.format(n): v for n, v in ingest_ttft(frame, s.scenario).items()}
        elif kind.fitted_figures:
            out[s.scenario] = {k: v for k, v in figure_values(s).named() if v is not None}
    return out


def figures_of_records(records: Iterable[RequestRecord]) -> dict[str, dict[str, float]]:
    """:func:`point_figures` of records in memory (a virtual evaluation)."""
    return point_figures(request_frame(records))


def as_values(figures: Mapping[str, float]) -> FigureValues:
    return FigureValues(**{k: figures.get(k) for k, _, _ in FIGURES})


def log_ratio(predicted: float | None, measured: float | None) -> float:
    """log(predicted / measured); NaN when either is missing."""
    if predicted is None or measured is None or predicted <= 0 or measured <= 0:
        return math.nan
    return float(np.log(predicted / measured))
