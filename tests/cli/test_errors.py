"""The error tree is plain exceptions (the core knows no click); the command line maps each class to one line and
its exit code, with no traceback even under ``CARDGEN_DEBUG`` (that is for unexpected errors)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from cardgen.cli import main as entry
from cardgen.errors import (
    CardgenError,
    NewerSchemaError,
    RenderError,
    RunError,
    RunFileError,
    ServerError,
    UsageError,
)

TREE = [
    (CardgenError("it  went\nwrong"), 1),
    (UsageError("bad flag"), 2),
    (ServerError("no server"), 3),
    (RunError("every request failed"), 4),
    (RenderError("no summary"), 5),
    (RunFileError("garbled", path=Path("run.json")), 5),
    (NewerSchemaError(Path("run.json"), found=9, known=1), 5),
]


def failing(exc: BaseException) -> click.Command:
    @click.command()
    def boom() -> None:
        raise exc

    return boom


def test_the_tree_is_plain_exceptions():
    assert not issubclass(CardgenError, click.ClickException)
    assert str(CardgenError("a\n  b")) == CardgenError("a\n  b").message == "a b"


@pytest.mark.parametrize("debug", ["", "1"])
@pytest.mark.parametrize("exc,code", TREE, ids=[type(e).__name__ for e, _ in TREE])
def test_each_error_is_one_line_and_its_exit_code(monkeypatch, capsys, exc, code, debug):
    monkeypatch.setattr(entry, "cli", failing(exc))
    monkeypatch.setenv("CARDGEN_DEBUG", debug)
    with pytest.raises(SystemExit) as out:
        entry.main([])
    assert out.value.code == code == exc.exit_code
    err = capsys.readouterr().err
    assert err == f"cardgen: error: {exc.message}\n"
    assert "Traceback" not in err


def test_clicks_own_usage_errors_keep_their_line_and_code(monkeypatch, capsys):
    @click.command()
    @click.argument("model")
    def build(model: str) -> None:
        pass

    monkeypatch.setattr(entry, "cli", build)
    with pytest.raises(SystemExit) as out:
        entry.main([])
    assert out.value.code == 2
    assert capsys.readouterr().err == "cardgen: error: Missing argument 'MODEL'.\n"


def test_an_unexpected_error_is_one_line_and_a_traceback_only_with_cardgen_debug(monkeypatch, capsys):
    monkeypatch.setattr(entry, "cli", failing(ValueError("x")))
    monkeypatch.delenv("CARDGEN_DEBUG", raising=False)
    with pytest.raises(SystemExit) as out:
        entry.main([])
    assert out.value.code == 70
    assert capsys.readouterr().err.startswith("cardgen: internal error: ValueError: x")
    monkeypatch.setenv("CARDGEN_DEBUG", "1")
    with pytest.raises(ValueError):
        entry.main([])
