"""tests/ mirrors cardgen/: a test module sits at tests/ top level (the tests of cardgen's top-level modules,
``tests/test_rundir.py`` for ``cardgen/rundir.py``; not one named after a package) or in the folder of its package's path
(``tests/kinds/closed/`` for ``cardgen/kinds/closed/``, ``tests/sim/`` for ``cardgen/sim/``), so a package's tests
are found where the package is, and go with it. Only the folders that test no one package are exempt: the
packaging checks, the benchmarks, the committed data and the example plugin (a package of its own).

And no two test modules share a name: the test folders have no ``__init__.py``, so pytest imports each module by
its file name alone (its ``prepend`` import mode), and a second ``test_program.py`` would fail to collect."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "cardgen"
EXEMPT = ("packaging", "bench", "data", "kinds/plugin_example")


def modules_under(root: Path = TESTS) -> list[Path]:
    """Every test module under ``root`` (pytest's default names, ``test_*.py`` and ``*_test.py``), as paths
    relative to it; caches and hidden folders left out."""
    found = {*root.rglob("test_*.py"), *root.rglob("*_test.py")}
    relative = (p.relative_to(root) for p in found)
    return sorted(p for p in relative if not any(part.startswith((".", "__")) for part in p.parts[:-1]))


def misplaced(modules: list[Path], package: Path = PACKAGE) -> list[str]:
    """The test modules of ``modules`` (relative to tests/) in a folder with no package of the same path under
    ``package``, nor under an exempt folder; and those at top level named after a package (``test_traces.py``
    for ``cardgen/traces/``: its tests go in its folder)."""
    out = []
    for module in modules:
        folder = module.parent.as_posix()
        if folder == ".":
            if (package / module.stem.removeprefix("test_") / "__init__.py").is_file():
                out.append(module.as_posix())
        elif not any(folder == e or folder.startswith(e + "/") for e in EXEMPT) \
                and not (package / folder / "__init__.py").is_file():
            out.append(module.as_posix())
    return out


def test_every_test_module_sits_beside_its_package():
    modules = modules_under()
    assert Path("kinds/closed/test_closed_program.py") in modules and Path("engines") in {m.parent for m in modules}
    wrong = misplaced(modules)
    assert not wrong, (f"test modules in a folder that cardgen/ does not have (move each to tests/<its package's "
                       f"path>/, or to tests/ for a top-level module): {wrong}")


def test_the_rule_tells_a_package_from_a_module_and_a_missing_folder():
    modules = [Path(p) for p in ("test_rundir.py", "sim/test_drive.py", "kinds/waves/test_waves_program.py",
                                 "rundir/test_recorder.py", "kinds/nosuchkind/test_x.py", "plan/test_plan.py",
                                 "bench/test_x.py", "kinds/plugin_example/cardgen_outsweep/test_x.py",
                                 "test_traces.py", "traces/test_traces.py")]
    # cardgen/rundir.py and cardgen/plan.py are modules, not packages: their tests sit at tests/ top level;
    # cardgen/traces is a package: its tests sit in tests/traces
    assert misplaced(modules) == ["rundir/test_recorder.py", "kinds/nosuchkind/test_x.py", "plan/test_plan.py",
                                  "test_traces.py"]


def test_no_two_test_modules_share_a_name():
    names = Counter(m.name for m in modules_under())
    assert names["test_rundir.py"] == 1
    twice = sorted(name for name, n in names.items() if n > 1)
    assert not twice, f"pytest imports a test module by its file name alone: rename one of each of {twice}"
