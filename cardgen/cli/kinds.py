"""``cardgen kinds``: the scenario kinds installed (entry-point group ``cardgen.kinds``), where each comes from,
and what its points measure; a kind that could not be loaded is listed with why."""

from __future__ import annotations

import click

from cardgen.kinds import BROKEN, KINDS, ORIGIN


def format_kinds() -> str:
    """The installed kinds as lines: ``name  (distribution, module)  description``; then the ones not loaded."""
    rows = [(name, f"({ORIGIN.get(name, '?')})", kind.description or "-") for name, kind in KINDS.items()]
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{n:<{width[0]}}  {o:<{width[1]}}  {d}" for n, o, d in rows]
    lines += [f"{name}: not loaded: {why}" for name, why in sorted(BROKEN.items())]
    return "\n".join(lines) + "\n"


@click.command("kinds")
def kinds() -> None:
    """List the installed scenario kinds (what a suite entry's ``kind:`` may name)."""
    click.echo(format_kinds(), nl=False)
