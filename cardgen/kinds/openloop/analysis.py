"""The open loop's own analysis (:data:`ANALYSIS`): vLLM's serving table of its points, one row per rate (req/s,
output and total tok/s, TTFT / TPOT / ITL mean, median and p99 in ms, goodput), ``tables/serving.json|csv``. Its
result (summary.json ``kinds["open"]``) names the points that sent requests; their figures are every point's rows
of ``scenarios``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.kinds import of_kind
from cardgen.kinds.openloop import OPEN
from cardgen.schemas.summary import KindResult, ScenarioSummary, Summary


class OpenResult(KindResult):
    """What the open loop's analysis saves: its points that sent requests, in run order."""

    points: list[str] = Field(default_factory=list)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def serving_table(scenarios: Sequence[ScenarioSummary], *, gpu: str | None) -> pd.DataFrame:
    """vLLM's serving table: one row per open-loop point that sent a request (a replayed trace's included)."""
    rows = []
    for s in of_kind(OPEN.name, scenarios):
        if s.requests == 0:
            continue
        row: dict[str, object] = {
            "Test name": s.scenario, "GPU": gpu or "", "Rate (req/s)": s.rate_label,
            "Prompt tokens": s.prompt_tokens, "Output tokens": s.output_tokens,
            "# of req.": s.requests, "Failed": s.failed,
            "Tput (req/s)": s.req_s, "Output Tput (tok/s)": s.output_tok_s, "Total Tput (tok/s)": s.total_tok_s,
        }
        for label, dist in (("TTFT", s.ttft_s), ("TPOT", s.tpot_s), ("ITL", s.itl_s)):
            row[f"Mean {label} (ms)"] = _ms(dist.mean)
            row[f"Median {label} (ms)"] = _ms(dist.p50)
            row[f"P99 {label} (ms)"] = _ms(dist.p99)
        row["Goodput (req/s)"] = s.goodput_req_s
        rows.append(row)
    return pd.DataFrame(rows)


def analyse(run: KindRun) -> OpenResult | None:
    """The open-loop points that sent requests (None: none did)."""
    sent = [s.scenario for s in run.scenarios if s.requests]
    return OpenResult(points=sent) if sent else None


def tables(result: OpenResult, s: Summary) -> Mapping[str, pd.DataFrame]:
    """vLLM's serving table of the run's open-loop points."""
    return {"serving": serving_table(s.scenarios, gpu=s.gpu)}


ANALYSIS = KindAnalysis(result=OpenResult, analyse=analyse, tables=tables, absent="no open-loop rates: no serving table")
