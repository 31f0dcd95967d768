"""cardgen's exceptions: one tree under one base, so the CLI can print one line and exit non-zero. The exit
code of each class is on its left.

    1  CardgenError              anything else cardgen reports to a person
    2  ├── UsageError            bad input: a flag, a model name, a URL, a suite file
    3  ├── ServerError           the server under test could not be reached or misbehaved before any load
    4  ├── RunError              a run went wrong (every request failed, the recorder broke)
    5  └── RenderError           a run directory could not be analysed or rendered
    5      └── RunFileError      a file of a run directory is missing, garbled or does not fit its schema
    5          └── NewerSchemaError  ... because a newer cardgen wrote it: upgrade

Plain exceptions: the core does not know the command line (pyproject's import-linter contract says so).
:func:`cardgen.cli.main.main` prints ``message`` as one line and exits with ``exit_code``.
"""

from __future__ import annotations

from pathlib import Path


class CardgenError(Exception):
    """Base of every error cardgen reports to a person: ``message`` is one line, the exit code ``exit_code``."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        self.message = " ".join(str(message).split())
        super().__init__(self.message)


class UsageError(CardgenError):
    """The command line or an input file asks for something that cannot be done; the message says what to fix."""

    exit_code = 2


class ServerError(CardgenError):
    """The server under test is unreachable or answered in a way cardgen cannot measure."""

    exit_code = 3
    log_tail = ""  # the last lines of the server's log, where it failed to start (cardgen.engines.launch)


class RunError(CardgenError):
    """The load run failed as a whole (for example every request failed, or records could not be written)."""

    exit_code = 4


class RenderError(CardgenError):
    """A run directory is missing files or holds data that cannot be analysed."""

    exit_code = 5


class RunFileError(RenderError):
    """A file of a run directory cannot be used; ``path`` is the file (or the directory when it is missing)."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = Path(path)


class NewerSchemaError(RunFileError):
    """The file was written by a newer cardgen, with a schema version this one does not know."""

    def __init__(self, path: Path, *, found: int, known: int) -> None:
        super().__init__(f"{path} was written by a newer cardgen (schema {found}; this one reads up to {known}): "
                         "upgrade cardgen", path=path)
        self.found, self.known = found, known


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line (its type's name when it says nothing)."""
    return " ".join(str(exc).split())[:limit] or type(exc).__name__
