"""The layers are checked, not just written down: ``make lint`` runs ruff (no import inside a function but a
heavy or order-bound one that says why), mypy and import-linter (pyproject.toml's contracts: no import up the
layers, no two modules or packages importing each other, no click in the error tree). Each check is shown to fail
on a deliberately wrong import, in a copy of the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAZY = re.compile(r"#\s*noqa:[^#]*PLC0415[,\s\w]*?\s{2,}(?P<why>\S.*)$")
NOQA = re.compile(r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<why>.*)$")


def lint_recipe() -> list[str]:
    """The commands ``make lint`` runs, as the Makefile says them (``$(BIN)`` is this virtualenv's bin)."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", text, re.M)
    assert recipe, "the Makefile has no lint target"
    return [line.strip().replace("$(BIN)", str(BIN)) for line in recipe.group(1).splitlines()]


def run_lint(tree: Path) -> list[subprocess.CompletedProcess]:
    # mypy shares the checkout's cache: a copy differs from it by one file, so it checks in seconds, not half a minute
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "PYTHONPATH": str(tree), "HOME": str(tree),
           "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache")}
    return [subprocess.run(cmd, shell=True, cwd=tree, capture_output=True, text=True, env=env, timeout=300)
            for cmd in lint_recipe()]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package, its tests and its configuration, copied: a tree to break."""
    for name in ("cardgen", "tests"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "Makefile"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_every_import_inside_a_function_says_why():
    for path in (ROOT / "cardgen").rglob("*.py"):
        for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
            if "PLC0415" in line:
                found = LAZY.search(line)
                assert found and len(found.group("why").split()) >= 3, f"{path.relative_to(ROOT)}:{n} says no why"


def test_every_noqa_says_why():
    """A ``noqa`` that stays names its reason on its line (ruff's RUF100 fails one that silences nothing)."""
    for folder in ("cardgen", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            with path.open("rb") as fh:
                comments = [t for t in tokenize.tokenize(fh.readline) if t.type == tokenize.COMMENT]
            for t in comments:
                found = NOQA.search(t.string)
                assert not found or len(found.group("why").split()) >= 2, \
                    f"{path.relative_to(ROOT)}:{t.start[0]} says no why"


def test_make_lint_passes_on_the_tree_as_it_is(copy):
    assert all(p.returncode == 0 for p in run_lint(copy)), [p.stdout[-2000:] for p in run_lint(copy)]


@pytest.mark.parametrize("where,wrong,says", [
    # an import up the layers: the core importing the command line
    ("cardgen/points.py", "from cardgen.cli import main as _main  # noqa: F401\n",
     "cardgen.points is not allowed to import cardgen.cli"),
    # the clock-free scenario rules reaching for the run directory (a sibling in the core layer: only the
    # forbidden contract stops it)
    ("cardgen/scenarios/resume.py", "from cardgen.rundir import RunDir as _RunDir  # noqa: F401\n",
     "cardgen.scenarios is not allowed to import cardgen.rundir"),
    # ... or a kind's program reaching for the clock (the same contract: programs are told the time, they never
    # read it) or for the run directory
    ("cardgen/kinds/waves/program.py", "import time as _time  # noqa: F401\n",
     "cardgen.kinds is not allowed to import time"),
    ("cardgen/kinds/closed/program.py", "from cardgen.runwriter import RunWriter as _W  # noqa: F401\n",
     "cardgen.kinds is not allowed to import cardgen.runwriter"),
    # a kind's own stage imports the stage it plugs into (pyproject's ignore_imports), and nothing above it; its
    # program imports no stage
    ("cardgen/kinds/slosearch/section.py", "from cardgen.cli import main as _main  # noqa: F401\n",
     "cardgen.kinds is not allowed to import cardgen.cli"),
    ("cardgen/kinds/slosearch/program.py", "from cardgen.card import table as _table  # noqa: F401\n",
     "cardgen.kinds is not allowed to import cardgen.card"),
    # two modules of one layer importing each other
    ("cardgen/precision.py", "import cardgen.kinds.closed.program  # noqa: F401\n", "No cycles are allowed"),
    # the error tree importing the command line's library (pyproject's "errors-without-click" contract)
    ("cardgen/errors.py", "import click  # noqa: F401\n", "cardgen.errors is not allowed to import click"),
    # an import inside a function that does not say why
    ("cardgen/suite.py", "\n\ndef _late() -> None:\n    import json  # noqa: F401\n", "PLC0415"),
])
def test_make_lint_fails_on_a_wrong_import(copy, where, wrong, says):
    path = copy / where
    text = path.read_text()
    if wrong.startswith("\n"):
        text += wrong
    else:  # after the module's own imports
        at = text.index("\n\n\n", text.index("from __future__ import annotations"))
        text = text[:at] + "\n" + wrong.rstrip("\n") + text[at:]
    path.write_text(text)
    results = run_lint(copy)
    failed = [p for p in results if p.returncode != 0]
    assert failed, "make lint passed a wrong import"
    assert says in "".join(p.stdout + p.stderr for p in failed)
