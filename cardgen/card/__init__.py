"""The card: ``README.md`` with Hugging Face front matter, rendered with Jinja2 from an analysed run.

Entry point: :func:`render_run` rebuilds ``summary.json``, ``tables/``, ``figures/`` and ``README.md`` of a run
directory from its raw files.
"""

from cardgen.card.render import RenderOptions, render_card, render_markdown, render_run

__all__ = ["RenderOptions", "render_card", "render_markdown", "render_run"]
