"""How ``cardgen diff`` compares a structured point (:data:`DIFF`): each arm on its own, never pooled.

A point's constrained and free requests ran in turn at the same lengths and parallel count; pooled, their TTFT
and TPOT would be a mixture that moves when the share of either moves. So the point's figures are each arm's TTFT
and TPOT percentiles (bootstrapped over that arm's requests, each a unit, as the analysis took them), each arm's
throughput, the ratio of constrained to free TPOT and TTFT medians (the overhead plus one) and the share of
answers that validated: the last three are one number per run, whose interval the card gives (a bootstrap of the
overhead, a Wilson interval of the share).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cardgen.diff.kindparts import HIGHER, LOWER, KindDiff, KindFigure
from cardgen.kinds.structured.analysis import StructuredOutputs
from cardgen.schemas.summary import ScenarioSummary

_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))
_STATS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
_ONE_NUMBER = "one number of the run's arms (the card gives its interval): no resampled interval"


def _of_arm(arm: str) -> Any:
    return lambda rows: (rows["phase"] == arm).to_numpy()


def _figures(s: ScenarioSummary, saved: Mapping[str, Any] | None) -> Sequence[KindFigure]:
    if saved is None:
        return ()
    result = StructuredOutputs.model_validate(saved)
    point = next((p for p in result.points if p.scenario == s.scenario), None)
    if point is None:
        return ()
    out: list[KindFigure] = []
    for arm in point.arms:
        for metric, label in _METRICS:
            for stat, q in _STATS:
                value = getattr(getattr(arm, metric), stat)
                if value is not None:
                    out.append(KindFigure(f"{arm.arm}/{metric}/{stat}", f"{arm.arm} {label} {stat}", "s", LOWER,
                                          float(value), rows=_of_arm(arm.arm), metric=metric, q=q))
        if arm.throughput_tok_s is not None:
            out.append(KindFigure(f"{arm.arm}/output_tok_s", f"{arm.arm} output throughput", "tok/s", HIGHER,
                                  arm.throughput_tok_s, note=_ONE_NUMBER))
    for name, overhead in (("TPOT", point.tpot_overhead), ("TTFT", point.ttft_overhead)):
        if overhead is not None:
            out.append(KindFigure(f"constrained_over_free/{name.lower()}", f"constrained / free {name} p50",
                                  "ratio", LOWER, 1 + overhead, note=_ONE_NUMBER))
    if point.valid_share is not None:
        out.append(KindFigure("valid_share", "share of answers that validated", "fraction", HIGHER,
                              point.valid_share, note=_ONE_NUMBER))
    return out


DIFF = KindDiff(figures=_figures, pooled=False)  # resampled request by request, as any kind's
