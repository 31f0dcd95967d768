"""A modelled card's expected error per headline: how far the virtual server is from real servers."""

from __future__ import annotations

from typing import TypedDict

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import Summary
from cardgen.sim.catalog import read_data


class ModelledError(TypedDict):
    """How far a modelled card's headlines are from real servers: the virtual server's error on published figures
    it was not fitted to (``cardgen.sim.calibration``)."""

    table: TableView
    target_pct: float
    recorded: bool  # False: the run did not record it; this cardgen's calibration is shown


# The card's headlines and the calibration's names for them.
_MODELLED_HEADLINES = (("ingestion_tok_s", "Prompt ingestion speed", "prompt_ingestion_tok_s", fmt.tok_s),
                       ("speed_10_tok_s", "Generation speed per request (10 parallel, 1024 → 128)",
                        "generation_tok_s_at_10_parallel_1024_128", fmt.tok_s),
                       ("kv_tokens", "KV cache capacity", "kv_cache_tokens", fmt.tokens))


def modelled_error(s: Summary, info: RunInfo) -> ModelledError | None:
    """The expected error next to each headline of a modelled run: as its run.json recorded it (the virtual
    server's ``expected_error``), else as this cardgen's calibration has it. None for a measured run."""
    if not s.modelled:
        return None
    sim = info.sim
    record = (sim.expected_error or sim.perf.get("expected_error")) if sim is not None else None  # its own, or its model's
    recorded = isinstance(record, dict)
    if not isinstance(record, dict):
        try:
            record = read_data("expected_error.yaml")
        except OSError:
            return None
    figures = record.get("figures") or {}
    rows = []
    for key, label, attr, show in _MODELLED_HEADLINES:
        e, value = figures.get(key), getattr(s.headline, attr)
        if not isinstance(e, dict):
            continue
        med, most = float(e["median_abs_pct"]) / 100, float(e["max_abs_pct"]) / 100
        likely = fmt.DASH if value is None or med >= 1 else (
            f"{show(float(f'{value / (1 + med):.3g}'))} – {show(float(f'{value / (1 - med):.3g}'))}")
        rows.append([label, show(value), fmt.error_pct(100 * med), likely, fmt.error_pct(100 * most),
                     f"{e['within_target']} of {e['rows']}"])
    if not rows:
        return None
    table = TableView(["Headline", "Modelled", "Expected error (median)", "Real value likely in",
                       "Largest error seen", f"Within {fmt.error_pct(float(record.get('target_pct', 15)))}"], rows)
    return ModelledError(table=table, target_pct=float(record.get("target_pct", 15)), recorded=recorded)
