"""Serving tests on a dataset: what each dataset entry sampled, the lengths it sent, and vLLM's nightly table."""

from __future__ import annotations

from typing import TypedDict

from markupsafe import Markup

from cardgen import numbers as fmt
from cardgen.analysis.serving import nightly_json
from cardgen.analysis.workloads import Workloads
from cardgen.card.table import TableView, float_formats, frame_view
from cardgen.datasets import describe, rule_text


class DatasetSection(TypedDict):
    """One dataset suite entry: what was sampled and how, and the lengths that were sent."""

    group: str
    dataset: str
    num_requests: int
    seed: int
    endpoint: str
    rule: str
    lengths: TableView | None
    length_stats: TableView | None
    sent: int


def nightly_table(w: Workloads) -> TableView | None:
    """Seed 003's serving table, its columns exactly."""
    if w.nightly.empty:
        return None
    return frame_view(w.nightly, {**float_formats(w.nightly), "# of req.": lambda v: f"{v:.0f}"})


def nightly_code(w: Workloads) -> Markup | None:
    """The nightly table as vLLM's JSON, for a code fence."""
    if w.nightly.empty:
        return None
    text = nightly_json(w.nightly)
    # cardgen's own JSON in a code fence: printed as is (json.dumps escapes no backtick: a fence inside a
    # value would end the block early, so none may stand there)
    return Markup(text.replace("`", "\\u0060"))


def dataset_sections(w: Workloads) -> list[DatasetSection]:
    """Each dataset entry: what it sampled and how, and a histogram and statistics of the lengths it sent."""
    datasets = []
    for g in w.groups:
        hist = w.lengths.get(g.group)
        lengths = stats = None
        if hist is not None:
            most = max(hist.prompts + hist.outputs)
            lengths = TableView(["Tokens", "Prompts", "", "Outputs", ""],
                                [[b, str(p), _bar(p, most), str(o), _bar(o, most)]
                                 for b, p, o in zip(hist.bins, hist.prompts, hist.outputs, strict=True)],
                                ["l", "r", "l", "r", "l"])
            stats = TableView(["Length (tokens)", "Mean", "Median", "P99", "Min", "Max"],
                              [[label, *(fmt.sig(st[k]) for k in ("mean", "median", "p99", "min", "max"))]
                               for label, st in (("Prompt", hist.prompt_stats), ("Output", hist.output_stats))])
        datasets.append(DatasetSection(group=g.group, dataset=describe(g.dataset), num_requests=g.num_requests,
                                       seed=g.seed, endpoint=g.endpoint, rule=rule_text(), lengths=lengths,
                                       length_stats=stats, sent=hist.requests if hist else 0))
    return datasets


def _bar(n: int, most: int, width: int = 30) -> str:
    return "█" * max(1 if n else 0, round(width * n / most)) if most else ""
