"""The batch kind's part of the card (cardgen/kinds/batch/section.py), read back from summary.json's
``kinds.batch``: the batch table in the card's ``tables`` slot, and for a run without a batch sweep the words that
say so."""

from __future__ import annotations

from cardgen.card.kindparts import kind_sections
from cardgen.kinds.batch.analysis import BatchRow, BatchTable
from cardgen.schemas.summary import Summary


def _row(step: str, metric: str, unit: str, size: int, value: float, ci: bool = True) -> BatchRow:
    return BatchRow(step=step, metric=metric, unit=unit, batch_size=size, average=value, lowest=value * 0.9,
                    highest=value * 1.1, p50=value, p90=value * 1.05, p99=value * 1.09, runs=3,
                    average_ci_low=value * 0.95 if ci else None, average_ci_high=value * 1.05 if ci else None)


def test_the_section_is_the_table_from_kinds_batch():
    table = BatchTable(rows=[_row("Prefill", "latency", "ms", 1, 15.3), _row("Prefill", "latency", "ms", 2, 25.2),
                             _row("Decode", "throughput", "tokens/s", 1, 77.7, ci=False)])
    text = kind_sections(Summary.model_validate({"model": "m", "kinds": {"batch": table.model_dump(mode="json")}}))
    tables = text["tables"]
    assert tables.startswith("## Batch table\n\nB requests sent at once, repeated (warm-up runs left out)")
    assert "| Prefill | 1 | 15.3 ms | 14.5–16.1 ms | 13.8 ms | 16.8 ms | 15.3 ms | 16.1 ms | 16.7 ms | 3 |" in tables
    assert "|  | 2 | 25.2 ms |" in tables  # the step named on its first row only
    assert "| Decode | 1 | 77.7 tokens/s | — | " in tables  # one latency table, one throughput table
    assert tables.count("| Step | Batch Size |") == 2 and "no batch sweep" not in tables


def test_a_run_without_the_result_says_it_has_no_batch_sweep():
    text = kind_sections(Summary.model_validate({"model": "m"}))
    assert text["tables"] == "## Batch table\n\nThis run has no batch sweep.\n"
