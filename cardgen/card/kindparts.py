"""A kind's own part of the card: the card stage's half of the kind interface.

A kind whose figures are its own names a :class:`KindSection` (``Kind.section``, ``"module:attribute"``, in its
folder): the type of its result (as its analysis saved it in ``summary.json``'s ``kinds``: read back here, so a
card is rendered from the run's files alone), a Jinja template beside it, the context that template prints, and
the place of the card it goes in (:data:`SLOTS`: places the card's template names, never a kind). The template is
rendered with the card's own environment (its filters, and its escaping of every expression), so a kind's
section reads like the rest of the card. The card never names a kind here: it asks every installed kind.

    Kind.section ──> KindSection(result=R, template=PATH, context=f, slot=S)
    kind_sections(summary) -> {slot: Markdown}        f(R, summary) -> dict | None   (None: no section)
    kind_main_rows(summary), kind_answers(summary)     its headline rows and words, where it has any
    kind_methods(**settings)                           its paragraph of the card's method text (``method``)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup
from pydantic import ValidationError

from cardgen.card.templates import environment
from cardgen.errors import RenderError
from cardgen.kinds import KINDS
from cardgen.kinds.kind import part
from cardgen.schemas.summary import KindResult, Summary

# where on the card a kind's section may go: after the main metrics (with the headlines, before cost), after the
# cost and calibration sections (the serving loads' own: generation speed, latency), under "Serving under load"
# (before FastGen's table and the latency figures of every serving load), in the KV cache section
# (after its estimates and the methods that gave none, before its figure), after the workload sections (datasets,
# replayed traces), or after the batch table
SLOTS = ("headlines", "serving", "rates", "kv", "workloads", "tables")


@dataclass(frozen=True)
class KindSection:
    """A kind's part of the card."""

    result: type[KindResult]  # what its analysis saved (summary.json ``kinds[name]``)
    template: Path  # its Jinja template (beside the module that makes the section)
    context: Callable[[Any, Summary], dict[str, Any] | None]  # result, summary -> what the template prints
    slot: str = "workloads"  # one of SLOTS
    order: int = 0  # its place among the sections of its slot (the lowest first; then the kinds' order)
    # whether the section is shown for a run that has no result of the kind: ``context`` is then given None (a
    # section that says "this run has no batch sweep"); a kind not installed shows nothing either way
    always: bool = False
    # its headline contributions: rows of the card's main table (Metric, Value, 95 % interval, Precision, How),
    # and the words the build's last line adds (``between 4.2 and 4.6 req/s within the SLO``)
    main_rows: Callable[[Any], list[list[str]]] | None = None
    answers: Callable[[Any], list[str]] | None = None
    # its paragraph of the card's "how the numbers are measured" text (a template beside it, given the card's
    # method settings: ``saturation``), shown whenever the kind is installed, as the rest of that text is
    method: Path | None = None


def _results(summary: Summary, *, absent: bool = False) -> list[tuple[str, KindSection, KindResult | None]]:
    """Every installed kind with a section whose result the run holds (with ``absent``, also those whose section
    is ``always`` shown, with None), in the order of their sections: its name, its section, its result."""
    out: list[tuple[str, KindSection, KindResult | None]] = []
    for name, kind in KINDS.items():
        saved = summary.kinds.get(name)
        if kind.section is None:
            continue
        section: KindSection = part(kind.section)
        if section.slot not in SLOTS:
            raise RenderError(f"kind {name!r}: its section's slot {section.slot!r} is none of the card's "
                              f"({', '.join(SLOTS)})")
        if saved is None:
            if absent and section.always:
                out.append((name, section, None))
            continue
        try:
            out.append((name, section, section.result.model_validate(saved)))
        except ValidationError as exc:
            raise RenderError(f"kind {name!r}: summary.json's result does not read as "
                              f"{section.result.__name__} ({exc.error_count()} errors)") from None
    return sorted(out, key=lambda x: x[1].order)  # stable: the kinds' order within an order


def kind_main_rows(summary: Summary) -> list[list[str]]:
    """The kinds' rows of the card's main table, in the kinds' order."""
    return [row for _, section, result in _results(summary) if section.main_rows is not None and result is not None
            for row in section.main_rows(result)]


def kind_answers(summary: Summary) -> list[str]:
    """The kinds' words for the build's last line, in the kinds' order."""
    return [words for _, section, result in _results(summary) if section.answers is not None and result is not None
            for words in section.answers(result)]


def kind_sections(summary: Summary) -> dict[str, Markup]:
    """Every installed kind's section that the run has a result for, rendered, joined by slot (each slot's text
    empty when no kind fills it)."""
    out: dict[str, list[str]] = {slot: [] for slot in SLOTS}
    for _, section, result in _results(summary, absent=True):
        context = section.context(result, summary)
        if context is None:
            continue
        text = environment().from_string(section.template.read_text(encoding="utf-8")).render(**context)
        out[section.slot].append(text.strip("\n") + "\n")
    return {slot: Markup("\n".join(texts)) for slot, texts in out.items()}


def kind_methods(**settings: Any) -> Markup:
    """Every installed kind's paragraph of the card's method text, in the kinds' order, rendered with the card's
    method ``settings``."""
    texts = []
    for installed in KINDS.values():
        if installed.section is None:
            continue
        section: KindSection = part(installed.section)
        if section.method is not None:
            text = environment().from_string(section.method.read_text(encoding="utf-8")).render(**settings)
            texts.append(text.strip("\n") + "\n")
    return Markup("\n".join(texts))
