"""The ``cardgen`` command. Thin: each sub-command lives in its own module, imported only when it runs, so
``cardgen --help`` stays fast and heavy libraries load only where needed."""

from __future__ import annotations

import importlib
import os
import sys

import click

from cardgen import __version__
from cardgen.errors import CardgenError

# name -> (module, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "build": ("cardgen.cli.build", "build", "Measure a server (or the virtual GPU server) and write a card."),
    "plan": ("cardgen.cli.plan", "plan", "Predict the GPU time a suite will cost, before any server runs."),
    "render": ("cardgen.cli.render", "render", "Re-analyse a run directory and rebuild its card."),
    "resume": ("cardgen.cli.resume", "resume", "Continue a run that was cut off, where it stopped."),
    "worker": ("cardgen.cli.worker", "worker", "Run a Locust load worker for a master on another machine."),
    "serve-sim": ("cardgen.cli.serve_sim", "serve_sim", "Run the virtual GPU server on its own."),
    "site": ("cardgen.cli.site", "site", "Build the static report site from every run."),
    "push": ("cardgen.cli.push", "push", "Push a card (or a run) to the Hugging Face Hub."),
    "diff": ("cardgen.cli.diff", "diff", "Compare two runs: every shared figure's ratio and its significance."),
    "kinds": ("cardgen.cli.kinds", "kinds", "List the installed scenario kinds, where each comes from, and what it measures."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module, attr, _ = spec
        try:
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        except (ImportError, AttributeError):
            if os.environ.get("CARDGEN_DEBUG"):
                raise
            return _unavailable(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str) -> click.Command:
    @click.command(name=name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise CardgenError(f"'cardgen {name}' is not available in this build of cardgen")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cardgen")
def cli() -> None:
    """cardgen: benchmark an LLM inference server and publish what it measures as a model card."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: a :class:`~cardgen.errors.CardgenError` (plain exceptions: the core knows no click) or click's
    own usage error prints one line and exits with its code; an unexpected error prints one line too (the
    traceback with CARDGEN_DEBUG=1); Ctrl-C exits 130; a command that exits with a status (``ctx.exit(3)``)
    keeps it."""
    try:
        code = cli.main(args=argv, prog_name="cardgen", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("cardgen: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("cardgen: interrupted", err=True)
        sys.exit(130)
    except CardgenError as exc:  # cardgen's own tree: plain exceptions, each with its exit code
        click.echo(f"cardgen: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # click's own: a missing argument, a bad option value
        click.echo(f"cardgen: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if _interrupted_inside(exc):
            click.echo("cardgen: interrupted", err=True)
            sys.exit(130)
        if os.environ.get("CARDGEN_DEBUG"):
            raise
        click.echo(f"cardgen: internal error: {type(exc).__name__}: {exc} (set CARDGEN_DEBUG=1 for details)",
                   err=True)
        sys.exit(70)
    if isinstance(code, int) and code:  # a command's ctx.exit(n): click returns n outside standalone mode
        sys.exit(code)


def _interrupted_inside(exc: Exception) -> bool:
    """A Ctrl-C that came while pydantic-core ran a serializer of Python's (a record's chunk times): pydantic turns
    the :class:`KeyboardInterrupt` into a ``PydanticSerializationError`` that names it, and keeps nothing else of
    it. A run takes its Ctrl-C where none can land there (:mod:`cardgen.sim.interrupts`, the load engine's stop
    flag); anything else it cuts short (a card being rendered) ends as an interrupted command, not an internal
    error."""
    pydantic_core = sys.modules.get("pydantic_core")
    return (pydantic_core is not None and isinstance(exc, pydantic_core.PydanticSerializationError)
            and "KeyboardInterrupt" in str(exc))
