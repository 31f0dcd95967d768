"""A reasoning model's figures per point (pure): time to the answer's first token with the same statistics as
TTFT, reasoning and answer tokens per request, and their speeds (formulas in :mod:`cardgen.analysis.requests`).

A run reasons when some request streamed reasoning (``reasoning`` / ``reasoning_content`` deltas, or a
``<think>`` span) or the server counted reasoning tokens. A request whose output ended inside its reasoning (its
``max_tokens`` spent thinking) has no time to first answer token: it is counted in ``unanswered``, not timed.
"""

from __future__ import annotations

import pandas as pd

from cardgen.analysis.stats import describe
from cardgen.schemas.summary import ScenarioSummary


def reasons(requests: pd.DataFrame) -> bool:
    """Whether any request of the run streamed reasoning or had reasoning tokens counted."""
    if requests.empty:
        return False
    return bool((requests["reasoning_chunks"] > 0).any() or (requests["reasoning_tokens"] > 0).any())


def reasoning_figures(summary: ScenarioSummary, ok: pd.DataFrame) -> None:
    """Fill ``summary``'s reasoning figures from the successful requests its figures come from."""
    summary.ttfa_s = describe(ok["ttfa_s"])
    summary.reasoning_tok_s = describe(ok["reasoning_tok_s"])
    summary.answer_tok_s = describe(ok["answer_tok_s"])
    counted = ok["reasoning_tokens"].dropna()
    if len(counted):
        summary.reasoning_tokens_mean = float(counted.mean())
        summary.answer_tokens_mean = float(ok.loc[counted.index, "answer_tokens"].mean())
    summary.unanswered = int(((ok["reasoning_chunks"] > 0) & ok["ttfa_s"].isna()).sum())
    sources = sorted(set(ok["reasoning_tokens_source"]) - {""})
    summary.reasoning_tokens_source = " and ".join(sources) or None
