"""Markdown building blocks for the template, each returning safe :class:`Markup` with every piece of text
inside escaped by :func:`cardgen.card.escape.md_escape`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from markupsafe import Markup

from cardgen.card.escape import md_escape


class Table(Protocol):
    columns: list[str]
    rows: list[list[str]]
    align: list[str]


def md_table(table: Table) -> Markup:
    """A GitHub-flavoured Markdown table, followed by a blank line."""

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(md_escape(c) for c in cells) + " |"

    rule = "| " + " | ".join("---:" if a == "r" else ":---" for a in table.align) + " |"
    return Markup("\n".join([line(table.columns), rule, *(line(r) for r in table.rows)]) + "\n\n")


def md_image(path: Markup | None, alt: str) -> Markup:
    """``![alt](path)`` and a blank line; nothing when there is no figure. ``path`` must be cardgen's own."""
    if not path:
        return Markup("")
    if not isinstance(path, Markup):
        raise TypeError("figure paths must be Markup made by cardgen")
    return Markup(f"![{md_escape(alt)}]({path})\n\n")
