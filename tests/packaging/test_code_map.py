"""The README's layer drawing and code map stay current: the drawing's rows are pyproject's layers contract, and
the code map names every package under ``cardgen/`` and every top-level module that is a layer of its own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cardgen"


def readme_part(start: str, end: str) -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    return text[text.index(start):text.index(end, text.index(start))]


def contract_layers() -> list[set[str]]:
    """The layers contract's layers, highest first, as the short names of their modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    [layers] = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    return [{name.strip().removeprefix("cardgen.") for name in re.split(r"[:|]", layer)} for layer in layers["layers"]]


def drawn_layers() -> list[set[str]]:
    """The drawing's rows, highest first: the names left of the description (a row may go on, indented)."""
    block = readme_part("Layers, lowest last", "Code map").split("```")[1]
    rows: list[set[str]] = []
    for line in block.strip("\n").splitlines():
        names = set(re.split(r"\s{2,}", line.strip())[0].removeprefix("core:").split())
        if line.startswith(" "):
            rows[-1] |= names
        else:
            rows.append(names)
    return rows


def code_map() -> str:
    return readme_part("Code map", "Stages talk through the files")


def packages() -> list[str]:
    """Every package under cardgen/, as the README names it (``cardgen/card/sections``)."""
    return sorted(init.parent.relative_to(ROOT).as_posix() for init in PACKAGE.rglob("__init__.py")
                  if init.parent != PACKAGE)


def layer_modules() -> list[str]:
    """The top-level modules (not packages) that are layers in the contract, as ``cardgen/NAME.py``."""
    names = set().union(*contract_layers())
    return sorted(f"cardgen/{name}.py" for name in names if (PACKAGE / f"{name}.py").is_file())


def test_the_layer_drawing_is_the_contract():
    assert drawn_layers() == contract_layers()


def named(package: str, text: str) -> bool:
    """Whether ``text`` names ``package`` itself (``cardgen/card`` or ``cardgen/card/``, not only
    ``cardgen/card/sections``)."""
    return re.search(re.escape(package) + r"(?![\w.])(?!/\w)", text) is not None


def test_the_code_map_names_every_package():
    assert "cardgen/card/sections" in packages()
    missing = [p for p in packages() if not named(p, code_map())]
    assert not missing, f"README's code map lacks {missing}"


def test_the_code_map_names_every_module_that_is_a_layer():
    assert "cardgen/slo.py" in layer_modules()
    missing = [m for m in layer_modules() if m not in code_map()]
    assert not missing, f"README's code map lacks {missing}"


def test_a_package_named_only_through_a_subpackage_is_missing():
    assert named("cardgen/schemas", "`cardgen/schemas/` holds") and named("cardgen/traces", "`cardgen/traces` ...")
    assert not named("cardgen/card", "`cardgen/card/sections`") and not named("cardgen/sim", "`cardgen/simple`")
