"""Rendering the site's per-run, per-model, per-GPU and per-comparison pages: Markdown to HTML on every core,
before MkDocs builds, instead of one page after another inside it.

Converting a card's Markdown (hundreds of table cells) is most of what a site build costs: tens of milliseconds a
page, on one core, in MkDocs. These pages are cardgen's own, so nothing in them needs MkDocs' own Markdown pass:
no link to another page's Markdown source (their links are relative HTML links, computed by
:mod:`cardgen.site.plan`), and every link of a card to a file of its run is checked and localized first
(:func:`cardgen.site.mdtext.localize_links`). The site build converts them in worker processes
(:func:`parallel_map`) with the site's own Markdown extensions, the sanitizer included, exactly as MkDocs would
(:func:`render_markdown`); :class:`PageRenderPlugin` hands MkDocs each page's HTML and table of contents, so
MkDocs only lays them out in the theme. A page it was not given is converted in the plugin, the same way.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cardgen import __version__
from cardgen.forked import forked_map

T = TypeVar("T")
R = TypeVar("R")
ENTITY_DIRS = ("runs", "models", "gpus", "compare")  # their pages below the first level are rendered here
_POOL_MIN_ITEMS = 16  # fewer pages are not worth starting processes for


def is_entity_page(src_uri: str) -> bool:
    """A run's, model's, GPU's or comparison's page (``runs/.../index.md``), not a top page or index."""
    parts = src_uri.split("/")
    return len(parts) >= 3 and parts[0] in ENTITY_DIRS and parts[-1].endswith(".md")


@dataclass(frozen=True)
class Rendered:
    html: str
    toc_tokens: list[Any]  # Python-Markdown's toc tokens (dicts: MkDocs types them with a private TypedDict)


@dataclass(frozen=True)
class MarkdownSetup:
    """The site's Markdown extensions and their options (from the MkDocs config), picklable for workers."""

    extensions: tuple[Any, ...]
    configs: dict[str, Any]

    @classmethod
    def from_config(cls, config: Any) -> MarkdownSetup:
        return cls(tuple(config.markdown_extensions), dict(config.mdx_configs or {}))

    def key(self, markdown: str) -> str:
        digest = hashlib.sha256(f"{__version__}\0{self.extensions!r}\0{sorted(self.configs.items())!r}\0".encode())
        digest.update(markdown.encode("utf-8"))
        return digest.hexdigest()


_MD: dict[str, Any] = {}  # one Markdown converter per setup and process


def render_markdown(setup: MarkdownSetup, markdown: str) -> Rendered:
    """One page body as MkDocs' own conversion makes it (same extensions and options), with its TOC tokens."""
    import markdown as md_lib  # noqa: PLC0415  loaded with MkDocs, when pages are rendered

    which = setup.key("")
    md = _MD.get(which)
    if md is None:
        md = _MD[which] = md_lib.Markdown(extensions=list(setup.extensions), extension_configs=setup.configs)
    md.reset()
    html = md.convert(markdown)
    return Rendered(html, list(getattr(md, "toc_tokens", [])))


_CARDS: dict[str, Rendered] = {}  # this process's cards: identical card text is converted once


def _nest(tokens: list[dict[str, Any]], token: dict[str, Any]) -> None:
    """Add a heading's TOC token where the table of contents of one document would have it."""
    if tokens and tokens[-1]["level"] < token["level"]:
        _nest(tokens[-1]["children"], token)
    else:
        tokens.append(token)


def render_with_header(setup: MarkdownSetup, card: str, split: int, header: str, tail: str) -> Rendered:
    """``card[:split] + header + card[split:] + tail`` rendered as the one Markdown document it makes (a card
    whose title, up to ``split``, is followed by a raw HTML ``header``, and a ``tail`` section), with the card
    converted once per process for identical text: a site of copies of one run renders its card once."""
    key = setup.key(card)
    whole = _CARDS.get(key)
    if whole is None:
        whole = _CARDS[key] = render_markdown(setup, card)
    html = whole.html
    head = render_markdown(setup, header).html
    cut = html.index("</h1>\n") + len("</h1>\n") if split and "</h1>\n" in html else 0
    html = html[:cut] + head + "\n\n" + html[cut:]  # a raw HTML block ends with its own line break
    toc = copy.deepcopy(whole.toc_tokens)  # the cached card's tokens stay as they are
    if tail.strip():
        rest = render_markdown(setup, tail)
        html += "\n" + rest.html
        for token in rest.toc_tokens:
            _nest(toc, token)
    return Rendered(html, toc)


def page_body(source: str) -> str:
    """A page source's Markdown as MkDocs reads it: its front matter taken off."""
    from mkdocs.utils import meta  # noqa: PLC0415  MkDocs is heavy: loaded when pages are rendered

    return meta.get_data(source)[0]


def parallel_map(fn: Callable[[T], R], items: Sequence[T], *, workers: int | None = None) -> list[R]:
    """``[fn(item) for item in items]`` on ``workers`` forked processes (default: one per core), in order
    (:func:`cardgen.forked.forked_map`): ``fn`` reaches what the parent set up before (the site plan) without
    pickling it; in this process where fork is not available or there are too few pages to share."""
    return forked_map(fn, items, workers=workers, min_items=_POOL_MIN_ITEMS)


class PageRenderPlugin:
    """A MkDocs plugin (added to the config by :func:`cardgen.site.build.run_mkdocs`): an entity page's Markdown
    is swapped for nothing before MkDocs converts it, and its HTML and TOC, rendered beforehand, put back after."""

    def __init__(self, setup: MarkdownSetup, rendered: dict[str, Rendered]) -> None:
        self.setup = setup
        self.rendered = rendered
        self._pending: dict[str, Rendered] = {}
        self.converted_here = 0  # pages that were not rendered beforehand

    def on_page_markdown(self, markdown: str, *, page: Any, config: Any, files: Any) -> str:
        if not is_entity_page(page.file.src_uri):
            return markdown
        done = self.rendered.get(self.setup.key(markdown))
        if done is None:
            done = render_markdown(self.setup, markdown)
            self.converted_here += 1
        self._pending[page.file.src_uri] = done
        return ""

    def on_page_content(self, html: str, *, page: Any, config: Any, files: Any) -> str:
        done = self._pending.pop(page.file.src_uri, None)
        if done is None:
            return html
        from mkdocs.structure.toc import get_toc  # noqa: PLC0415  MkDocs is heavy: loaded when pages are rendered

        page.toc = get_toc(done.toc_tokens)
        return done.html
