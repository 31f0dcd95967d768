"""Finding and loading the Jinja2 templates: the installed package's ``cardgen/templates`` first (the wheel
ships them there), then the repository's ``templates/`` (editable installs and a source checkout)."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

from cardgen import numbers as fmt
from cardgen.card.escape import md_escape
from cardgen.card.markdown import md_image, md_table
from cardgen.errors import RenderError

CARD_TEMPLATE = "card.md.j2"


def template_dirs() -> list[Traversable]:
    """Where templates are looked up, in order (only directories that exist)."""
    candidates: list[Traversable] = [resources.files("cardgen") / "templates",
                                     Path(__file__).resolve().parents[2] / "templates"]
    return [c for c in candidates if c.is_dir()]


def _load(name: str) -> str:
    for directory in template_dirs():
        candidate = directory / name
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise jinja2.TemplateNotFound(name)


def _finalize(value: object) -> object:
    """Every ``{{ }}`` output passes here: strings that are not :class:`markupsafe.Markup` are escaped."""
    if value is None:
        return fmt.DASH
    if isinstance(value, bool | int | float):
        return value
    return md_escape(value)


def environment() -> jinja2.Environment:
    """The card's Jinja environment: strict about undefined names, every expression escaped for Markdown."""
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load), autoescape=False, finalize=_finalize,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(sig=fmt.sig, integer=fmt.integer, tok_s=fmt.tok_s, ms=fmt.ms, secs=fmt.secs,
                       pct=fmt.pct, half_width=fmt.half_width, tokens=fmt.tokens, interval=fmt.interval, signed_pct=fmt.signed_pct,
                       usd=fmt.usd, md_table=md_table, md_image=md_image)
    return env


def get_template(name: str = CARD_TEMPLATE) -> jinja2.Template:
    try:
        return environment().get_template(name)
    except jinja2.TemplateNotFound:
        raise RenderError(f"template {name} not found in {', '.join(map(str, template_dirs())) or 'any'}: "
                          "reinstall cardgen") from None
