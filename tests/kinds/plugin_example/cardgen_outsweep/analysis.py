"""An ``outsweep`` point's figures: a lone request's decode speed, from the least-squares line of its end-to-end
time against the output tokens it generated (the server's count), over its successful requests; and each length's
median TTFT and E2E."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult


class LengthRow(Saved):
    output_tokens: int
    requests: int
    ttft_p50_s: float
    e2e_p50_s: float


class OutSweepResult(KindResult):
    version: int = 1
    scenario: str
    requests: int
    failed: int
    s_per_output_token: float | None = None  # the line's slope
    intercept_s: float | None = None  # what a request costs before its decode: prefill, queue, network
    decode_tok_s: float | None = None  # 1 / slope
    r2: float | None = None
    lengths: list[LengthRow] = Field(default_factory=list)


def analyse(run: KindRun) -> OutSweepResult | None:
    if not run.points or run.requests.empty:
        return None
    rows = run.requests
    ok = rows[rows["ok"] & rows["output_tokens"].notna() & rows["e2e_s"].notna()]
    result = OutSweepResult(scenario=run.points[0].name, requests=len(rows), failed=int((~rows["ok"]).sum()))
    if ok["output_tokens"].nunique() >= 2:
        x = ok["output_tokens"].to_numpy(dtype=float)
        y = ok["e2e_s"].to_numpy(dtype=float)
        slope, intercept = np.polyfit(x, y, 1)
        fitted = slope * x + intercept
        total = float(((y - y.mean()) ** 2).sum())
        result.s_per_output_token, result.intercept_s = float(slope), float(intercept)
        result.decode_tok_s = 1.0 / float(slope) if slope > 0 else None
        result.r2 = 1.0 - float(((y - fitted) ** 2).sum()) / total if total > 0 else None
    for target, group in ok.groupby("output_tokens_target", sort=True):
        result.lengths.append(LengthRow(output_tokens=int(target), requests=len(group),
                                        ttft_p50_s=float(group["ttft_s"].median()),
                                        e2e_p50_s=float(group["e2e_s"].median())))
    return result


ANALYSIS = KindAnalysis(result=OutSweepResult, analyse=analyse)
