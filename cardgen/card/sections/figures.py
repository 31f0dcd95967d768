"""The figure files a card links: only those the analysis' summary lists as written."""

from __future__ import annotations

from markupsafe import Markup

from cardgen.figures.names import FIGURE_NAMES
from cardgen.rundir import FIGURES_DIR
from cardgen.schemas.summary import Summary


def figure_path(s: Summary, name: str) -> Markup | None:
    """The relative path of figure ``name`` (safe: cardgen made it), or None when the run has no such figure."""
    path = f"{FIGURES_DIR}/{name}"
    return Markup(path) if path in s.figures else None


def figure_paths(s: Summary) -> dict[str, Markup | None]:
    """Every named figure of the card (:data:`cardgen.figures.names.FIGURE_NAMES`) by its key."""
    return {key: figure_path(s, name) for key, name in FIGURE_NAMES.items()}
