"""A Python-Markdown extension that makes every page of the site safe to show text from servers.

Cards and generated pages carry text that came from a server or a command line (model names, engine
versions, launch arguments). Markdown passes raw HTML through, so a model named ``<script>alert(1)</script>``
would run in the reader's browser. This extension:

- rewrites every raw HTML fragment through an allowlist: allowed tags keep only harmless attributes; any
  other tag (``script``, ``iframe``, ``style``, ``object`` ...) is escaped and shows as text;
- drops event-handler and ``style`` attributes from every element Markdown builds;
- keeps links and images local: ``javascript:``/``data:`` URLs are dropped, an image whose source is not a
  relative path (the site must work offline) becomes its alt text.

``mkdocs.yml`` enables it with ``markdown_extensions: [cardgen.site.sanitize]``; :func:`sanitize_html` is the
same rule for a single fragment.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as etree
from html.parser import HTMLParser

from markdown import Markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

ALLOWED_TAGS = frozenset(
    "a abbr b br caption center code col colgroup dd del details div dl dt em figcaption figure "
    "h1 h2 h3 h4 h5 h6 hr i img input ins kbd label li mark ol option p pre q s samp select small span "
    "strong sub summary sup "
    "table tbody td tfoot th thead tr u ul button".split()
) | frozenset("svg g line polyline circle rect text title".split())  # the site's own charts (cardgen.site.charts)
VOID_TAGS = frozenset({"br", "col", "hr", "img", "input"})
ALLOWED_ATTRS = frozenset(
    "align alt class colspan download for height hidden href id name open placeholder role rowspan scope "
    "selected "
    "span src title type value width".split()
) | frozenset(  # SVG geometry and presentation (paint values are checked: no url(), so nothing loads)
    "viewbox x y x1 y1 x2 y2 cx cy r points fill stroke stroke-width stroke-dasharray fill-opacity opacity "
    "text-anchor transform".split()
)
_PAINT_ATTRS = frozenset({"fill", "stroke", "transform"})
_PAINT_VALUE = re.compile(r"^[#\w\s.,()%-]*$")
URL_ATTRS = frozenset({"href", "src"})
_SAFE_LINK_SCHEMES = ("http", "https", "mailto")
_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*):")


def _attr_allowed(name: str) -> bool:
    return name in ALLOWED_ATTRS or name.startswith(("data-", "aria-"))


def is_local_url(url: str) -> bool:
    """A relative URL (no scheme, not protocol-relative): something the site itself serves."""
    stripped = url.strip()
    return not _SCHEME.match(stripped) and not stripped.startswith(("//", "\\\\", "/\\", "\\/"))


def url_allowed(attr: str, url: str) -> bool:
    """``src`` must be local (the site works offline); ``href`` may also be an http(s) or mailto link."""
    if is_local_url(url):
        return True
    if attr != "href":
        return False
    scheme = _SCHEME.match(url.strip())
    return scheme is not None and scheme.group(1).lower() in _SAFE_LINK_SCHEMES


class _Sanitizer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], closing: bool) -> None:
        if tag not in ALLOWED_TAGS:
            self.out.append(html.escape(self.get_starttag_text() or f"<{tag}>"))
            return
        kept = dict(_safe_attrs(tag, attrs))
        if tag == "img" and "src" not in kept:
            # An image that would load from elsewhere (or nothing): show its alt text instead.
            self.out.append(html.escape(kept.get("alt") or ""))
            return
        rendered = "".join(f' {k}="{html.escape(v)}"' for k, v in kept.items())
        self.out.append(f"<{tag}{rendered}{' /' if closing else ''}>")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closing=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closing=True)

    def handle_endtag(self, tag: str) -> None:
        if tag in ALLOWED_TAGS:
            if tag not in VOID_TAGS:
                self.out.append(f"</{tag}>")
        else:
            self.out.append(html.escape(f"</{tag}>"))

    def handle_data(self, data: str) -> None:
        self.out.append(html.escape(data, quote=False))

    def handle_entityref(self, name: str) -> None:
        self.out.append(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.out.append(f"&#{name};")

    def unknown_decl(self, data: str) -> None:
        self.out.append(html.escape(f"<![{data}]>"))

    # Comments, declarations and processing instructions are dropped.
    def handle_comment(self, data: str) -> None:
        pass

    def handle_decl(self, decl: str) -> None:
        pass

    def handle_pi(self, data: str) -> None:
        pass


def _safe_attrs(tag: str, attrs: list[tuple[str, str | None]]) -> list[tuple[str, str]]:
    kept: list[tuple[str, str]] = []
    for name, value in attrs:
        name = name.lower()
        if not _attr_allowed(name):
            continue
        value = "" if value is None else value
        if name in URL_ATTRS and not url_allowed(name, value):
            continue
        if name in _PAINT_ATTRS and (not _PAINT_VALUE.match(value) or "url" in value.lower()):
            continue
        kept.append((name, value))
    return kept


def sanitize_html(fragment: str) -> str:
    """The fragment with every tag outside the allowlist escaped into text, every unsafe attribute dropped."""
    parser = _Sanitizer()
    parser.feed(fragment)
    parser.close()
    if parser.rawdata:  # an unfinished tag at the end ("<script"): it is text
        parser.out.append(html.escape(parser.rawdata))
    return "".join(parser.out)


def sanitize_element(root: etree.Element) -> None:
    """Drop unsafe attributes from an element tree in place; a non-local image becomes its alt text."""
    for parent in root.iter():
        if parent.tag == "img" and not is_local_url(parent.get("src", "")):
            parent.tag, parent.text = "span", parent.get("alt", "")
            parent.attrib.clear()
        elif parent.tag == "a" and not url_allowed("href", parent.get("href", "")):
            parent.tag = "span"  # a link to javascript: (or the like) keeps its text, loses its target
            parent.attrib.clear()
        for name in list(parent.attrib):
            value = parent.attrib[name]
            lowered = name.lower()
            if (
                lowered.startswith("on")
                or lowered in ("style", "srcdoc", "formaction", "srcset")
                or (lowered in URL_ATTRS and not url_allowed(lowered, value))
            ):
                del parent.attrib[name]


class _RawHtmlTreeprocessor(Treeprocessor):
    """Runs right after inline parsing, before the table of contents reads headings."""

    def run(self, root: etree.Element) -> None:
        stash = self.md.htmlStash.rawHtmlBlocks
        for i, block in enumerate(stash):
            if isinstance(block, str):
                stash[i] = sanitize_html(block)
            else:
                sanitize_element(block)


class _AttributeTreeprocessor(Treeprocessor):
    """Runs near the end, after every extension that may have added attributes."""

    def run(self, root: etree.Element) -> None:
        sanitize_element(root)


class SanitizeExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # Python-Markdown's name
        md.treeprocessors.register(_RawHtmlTreeprocessor(md), "cardgen_raw_html", 19)
        md.treeprocessors.register(_AttributeTreeprocessor(md), "cardgen_attributes", 2)


def makeExtension(**kwargs: object) -> SanitizeExtension:  # Python-Markdown's entry point
    return SanitizeExtension(**kwargs)
