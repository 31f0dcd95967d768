"""What the analysis is asked for: service-level objectives and capacity thresholds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalysisOptions:
    """Options of the analysis (and so of a rendered card).

    ``slo_ttft_s`` and ``slo_tpot_s`` define goodput (a request counts when it meets both); ``min_speed_tok_s``
    and ``max_kv_usage`` define the capacity thresholds per (prompt, output) pair.
    """

    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.1
    min_speed_tok_s: float = 20.0
    max_kv_usage: float = 0.95

    def __post_init__(self) -> None:
        for name in ("slo_ttft_s", "slo_tpot_s", "min_speed_tok_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not 0 < self.max_kv_usage <= 1:
            raise ValueError("max_kv_usage must be in (0, 1]")
