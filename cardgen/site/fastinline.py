"""A Python-Markdown extension that makes the site's pages convert about twice as fast, with the same output.

Python-Markdown tries every inline pattern (code spans, escapes, links, images, HTML, entities, emphasis, line
breaks) on every piece of text, and a card's tables hold thousands of cells of plain numbers: most of a card's
conversion is spent finding nothing. Each of those patterns needs one of a few characters to match
(:data:`TRIGGERS`); text with none of them is left as it is without trying them. When Markdown has inline
patterns this module does not know (another extension's), nothing is skipped.

``mkdocs.yml`` enables it with ``markdown_extensions: [cardgen.site.fastinline]``.
"""

from __future__ import annotations

import re
from xml.etree.ElementTree import Element

from markdown import Markdown, util
from markdown.extensions import Extension
from markdown.treeprocessors import InlineProcessor

# Python-Markdown's own inline patterns, each needing one of TRIGGERS to match
KNOWN_PATTERNS = frozenset({
    "backtick", "escape", "reference", "link", "image_link", "image_reference", "short_reference",
    "short_image_ref", "autolink", "automail", "linebreak", "html", "entity", "not_strong", "em_strong",
    "em_strong2", "strong_em", "strong", "emphasis", "emphasis2",
})
TRIGGERS = re.compile(r"[`\\\[<&*_]|  \n")


class _FastInlineProcessor(InlineProcessor):
    fast = False

    def run(self, tree: Element, ancestors: list[str] | None = None) -> Element:
        names = getattr(self.md.inlinePatterns, "_data", None)  # the patterns registered, by name
        self.fast = names is not None and set(names) <= KNOWN_PATTERNS
        return super().run(tree, ancestors)

    def _InlineProcessor__handleInline(self, data: str, patternIndex: int = 0) -> str:
        if (self.fast and patternIndex == 0 and not isinstance(data, util.AtomicString)
                and not TRIGGERS.search(data)):
            return data  # no inline pattern can match: what trying every one of them would return
        handled: str = InlineProcessor._InlineProcessor__handleInline(  # type: ignore[attr-defined]  # name-mangled: not in the stubs
            self, data, patternIndex)
        return handled


class FastInlineExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # Python-Markdown's name
        if hasattr(InlineProcessor, "_InlineProcessor__handleInline"):
            md.treeprocessors.register(_FastInlineProcessor(md), "inline", 20)


def makeExtension(**kwargs: object) -> FastInlineExtension:  # Python-Markdown's entry point
    return FastInlineExtension(**kwargs)
