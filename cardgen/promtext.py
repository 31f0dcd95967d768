"""Parse Prometheus text exposition into plain data: ``{sample name: [{"labels": {...}, "value": v}]}``.

Sample names are kept as exposed (``vllm:prompt_tokens_total``, ``..._bucket``), so readers need not know
the family-name rules of ``prometheus_client`` (a counter's family drops ``_total``).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def parse_metrics(text: str) -> dict[str, list[dict[str, Any]]]:
    """Samples by name; NaN values are kept as None (JSON has no NaN). Raises ValueError on bad text."""
    out: dict[str, list[dict[str, Any]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = sample.value
            out.setdefault(sample.name, []).append(
                {"labels": dict(sample.labels), "value": None if math.isnan(value) else value}
            )
    return out
