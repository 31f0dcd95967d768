"""Pure functions over Markdown text: a card's front matter, the local files its links point at, GitHub
alerts, heading levels; code fences are left alone.

A card links its figures relative to its run directory (``figures/x.png``). The site and the Hub keep that
layout, so such links keep working as long as the files travel with the card: :func:`localize_links` lists
them, and turns a link to a file that does not exist (or lies outside the run directory) into plain text so
that one broken card cannot break the strict site build.
"""

from __future__ import annotations

import html
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from cardgen.site.sanitize import is_local_url

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^(?P=fence)[ \t]*$", re.DOTALL | re.MULTILINE)
_MD_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\(\s*<?(?P<url>[^)\s>]*)>?(?:\s+\"[^\"\n]*\")?\s*\)"
)
_MD_REF = re.compile(r"^(?P<head>[ ]{0,3}\[[^\]\n]+\]:[ \t]*)<?(?P<url>[^\s>]+)>?(?P<tail>.*)$", re.MULTILINE)
_HTML_TAG = re.compile(r"<(?P<tag>img|a)\b(?P<attrs>[^<>]*)>", re.IGNORECASE)
_HTML_ATTR = re.compile(
    r"\b(?P<name>src|href|alt)\s*=\s*(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)')", re.IGNORECASE
)


ADMONITIONS = {"NOTE": "note", "TIP": "tip", "IMPORTANT": "info", "WARNING": "warning", "CAUTION": "danger"}
_ALERT = re.compile(r"^>[ \t]*\[!(?P<kind>[A-Za-z]+)\][ \t]*\n(?P<body>(?:>.*(?:\n|\Z))*)", re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6})(?=\s)", re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ ]{0,3}(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_NOT_PROSE = re.compile(r"^(?:[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|[#|>]|!!!|$)")


def split_fences(markdown: str) -> list[tuple[str, bool]]:
    """The text cut into ``(part, is a fenced code block)`` pieces, in order."""
    parts: list[tuple[str, bool]] = []
    last = 0
    for fence in _FENCE.finditer(markdown):
        parts += [(markdown[last : fence.start()], False), (fence.group(0), True)]
        last = fence.end()
    parts.append((markdown[last:], False))
    return parts


def map_prose(markdown: str, fn: Callable[[str], str]) -> str:
    """``fn`` applied to everything outside fenced code blocks."""
    return "".join(text if code else fn(text) for text, code in split_fences(markdown))


def separate_lists(markdown: str) -> str:
    """A blank line before every list that follows a line of a paragraph. GitHub and the Hub start a list there
    (CommonMark: a list may interrupt a paragraph); Python-Markdown, which MkDocs uses, reads the items as more
    of the paragraph, and a card's list (its NOTE box's) would show as one line of dashes."""
    out: list[str] = []
    for line in markdown.split("\n"):
        if out and _LIST_ITEM.match(line) and not _NOT_PROSE.match(out[-1]):
            out.append("")
        out.append(line)
    return "\n".join(out)


def alerts_to_admonitions(markdown: str) -> str:
    """GitHub alerts (``> [!WARNING]`` blockquotes, as Hugging Face shows them) as MkDocs admonitions; a list
    inside one, or after any paragraph, stays a list (:func:`separate_lists`)."""

    def convert(m: re.Match[str]) -> str:
        kind = ADMONITIONS.get(m.group("kind").upper())
        if kind is None:
            return m.group(0)
        lines = separate_lists("\n".join(re.sub(r"^>[ ]?", "", line)
                                          for line in m.group("body").splitlines())).split("\n")
        return f"!!! {kind}\n\n" + "".join(f"    {line}\n" if line.strip() else "\n" for line in lines) + "\n"

    return map_prose(markdown, lambda text: _ALERT.sub(convert, separate_lists(text)))


def demote_headings(markdown: str, *, top: int = 3) -> str:
    """Shift ATX headings (outside code fences) so the shallowest one is level ``top``."""
    levels = [
        len(m.group(1)) for text, code in split_fences(markdown) if not code for m in _HEADING.finditer(text)
    ]
    if not levels:
        return markdown
    shift = max(0, top - min(levels))
    return map_prose(
        markdown, lambda text: _HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + shift), text)
    )


def split_front_matter(text: str) -> tuple[str, str]:
    """``(front matter YAML, body)``; the YAML is ``""`` when the text has none."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return "", text
    return match.group(1), text[match.end() :]


@dataclass
class LocalizedCard:
    markdown: str
    files: set[str] = field(default_factory=set)  # run-relative POSIX paths the card links to
    problems: list[str] = field(default_factory=list)  # one line per link turned into text


def _resolve(url: str, root: Path) -> str | None:
    """The run-relative path of a local link target that exists inside the run directory ``root`` (resolved),
    else None."""
    path = unquote(url.split("#", 1)[0].split("?", 1)[0])
    if not path or path.startswith("/") or path.lower().endswith(".md"):
        return None
    rel = posixpath.normpath(path)
    if rel == ".." or rel.startswith("../") or not (root / rel).is_file():
        return None
    parts = PurePosixPath(rel).parts
    if any((root.joinpath(*parts[:i])).is_symlink() for i in range(1, len(parts) + 1)):  # only a link can lead out
        target = (root / rel).resolve()
        if not target.is_relative_to(root):
            return None
        return target.relative_to(root).as_posix()
    return rel


def localize_links(markdown: str, run_dir: Path) -> LocalizedCard:
    """Find the run-local files a card links to; links to missing or outside files become their text."""
    out = LocalizedCard(markdown="")
    root = Path(run_dir).resolve()

    def check(url: str) -> bool:
        """True when the link may stay (external, an anchor, or an existing local file)."""
        if not url or url.startswith("#") or not is_local_url(url):
            return True
        rel = _resolve(url, root)
        if rel is None:
            out.problems.append(f"link to '{url}' has no file in {run_dir}: shown as text")
            return False
        out.files.add(rel)
        return True

    def md_link(m: re.Match[str]) -> str:
        return m.group(0) if check(m.group("url")) else m.group("text")

    def md_ref(m: re.Match[str]) -> str:
        return m.group(0) if check(m.group("url")) else ""

    def html_tag(m: re.Match[str]) -> str:
        attrs = {
            a.group("name").lower(): a.group("dq") if a.group("dq") is not None else a.group("sq")
            for a in _HTML_ATTR.finditer(m.group("attrs"))
        }
        key = "src" if m.group("tag").lower() == "img" else "href"
        url = html.unescape(attrs.get(key) or "")
        if check(url):
            return m.group(0)
        if key == "src":
            return attrs.get("alt") or ""
        return _HTML_ATTR.sub(lambda a: "" if a.group("name").lower() == "href" else a.group(0), m.group(0))

    def rewrite(part: str) -> str:
        part = _MD_LINK.sub(md_link, part)
        part = _MD_REF.sub(md_ref, part)
        return _HTML_TAG.sub(html_tag, part)

    out.markdown = map_prose(markdown, rewrite)
    return out
