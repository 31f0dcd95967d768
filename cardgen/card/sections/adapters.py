"""The LoRA adapters section: throughput and TPOT as more distinct adapters share the batches, and each
adapter's own figures."""

from __future__ import annotations

from typing import TypedDict

from cardgen import numbers as fmt
from cardgen.card.table import TableView, median_ci
from cardgen.schemas.summary import Summary


class AdaptersSection(TypedDict):
    scale: TableView  # per point, by distinct adapters in flight
    per_adapter: TableView


def adapters_section(s: Summary) -> AdaptersSection | None:
    """None when no request of the run asked for an adapter."""
    points = [x for x in s.scenarios if x.per_adapter and not x.not_run]
    if not points:
        return None
    groups = {x.group for x in points}  # their entries' points on the base model (0 adapters) are the baseline
    compared = [x for x in s.scenarios if x.group in groups and not x.not_run and x.requests]
    scale = [[x.scenario, str(len([a for a in x.per_adapter if a.adapter])), fmt.sig(x.adapters_in_flight or 0.0),
              fmt.tok_s(x.output_tok_s), median_ci(x.tpot_s, fmt.ms), median_ci(x.decode_tok_s, fmt.tok_s)]
             for x in sorted(compared, key=lambda x: (x.group, x.prompt_tokens, x.output_tokens, x.parallel or 0,
                                                     x.rate_rps or 0, x.adapters_in_flight or 0))]
    per_adapter = [[x.scenario, a.adapter or "(base model)", str(a.requests), median_ci(a.ttft_s, fmt.ms),
                    median_ci(a.tpot_s, fmt.ms), median_ci(a.decode_tok_s, fmt.tok_s), fmt.tok_s(a.output_tok_s)]
                   for x in points for a in x.per_adapter]
    return AdaptersSection(
        scale=TableView(["Scenario", "Adapters asked", "Distinct adapters in flight (mean)", "Output tok/s",
                         "TPOT median (95 % CI)", "Decode speed median (95 % CI)"], scale, ["l"] + ["r"] * 5),
        per_adapter=TableView(["Scenario", "Adapter", "Requests", "TTFT median (95 % CI)", "TPOT median (95 % CI)",
                               "Decode speed median (95 % CI)", "Output tok/s"], per_adapter, ["l", "l"] + ["r"] * 5))
