"""Making untrusted text (anything a server or a command line said) safe in Markdown and in YAML front matter.

- :func:`md_escape`: one line of inert text. Newlines collapse to spaces (a value cannot start a heading or
  end a table row), Markdown punctuation that could format or link is backslash-escaped (``\\ ` * _ [ ] | ~ $``)
  and ``&``, ``<``, ``>`` become entities (``<script>`` renders as the text ``<script>``; quotes need no escape
  in Markdown text, and no untrusted value is put inside an HTML attribute).
- :func:`front_matter`: YAML where every string is a JSON-style double-quoted scalar with ``<``, ``>`` and ``&``
  written as ``\\u003c``, ``\\u003e``, ``\\u0026``: the data round-trip exactly through ``yaml.safe_load`` while
  the file holds no raw tag.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def md_escape(text: object) -> Markup:
    """``text`` as inert Markdown (see the module docstring); already-safe :class:`Markup` passes unchanged."""
    if isinstance(text, Markup):
        return text
    flat = " ".join(str(text).split())
    return Markup(html.escape(_MD_SPECIAL.sub(r"\\\1", flat), quote=False))


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    text = json.dumps(str(value), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return "".join(c if c.isprintable() or ord(c) < 0x7F else _yaml_escape(c) for c in text)


def _yaml_escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _key(key: object) -> str:
    key = str(key)
    return key if _PLAIN_KEY.match(key) and key.lower() not in ("true", "false", "null", "yes", "no", "on",
                                                                  "off", "y", "n", "~") else _scalar(key)


def _block(data: Mapping[str, Any], indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for k, v in data.items():
        if isinstance(v, Mapping) and v:
            lines.append(f"{pad}{_key(k)}:")
            _block(v, indent + 1, lines)
        else:
            lines.append(f"{pad}{_key(k)}: {_inline(v)}")


def _inline(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    return _scalar(value)


def front_matter(data: Mapping[str, Any]) -> Markup:
    """``---``, ``data`` as block YAML, ``---``: safe to paste at the top of a card."""
    lines = ["---"]
    _block(data, 0, lines)
    lines.append("---")
    return Markup("\n".join(lines))
