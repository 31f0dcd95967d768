"""The installed package must carry what it needs at run time: templates, suites, presets, the site's defaults."""

import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_templates_suites_and_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.relative_to(ROOT / "templates").as_posix() for p in (ROOT / "templates").rglob("*")
                       if p.is_file())
    assert templates, "templates/ is empty"
    assert "sections/reasoning.md.j2" in templates  # the card's includes are shipped too
    for name in templates:
        assert f"cardgen/templates/{name}" in names
    for suite in ("quick", "standard", "full"):
        assert f"cardgen/suites/{suite}.yaml" in names
    assert any(n.startswith("cardgen/sim/data/") for n in names)
    assert "cardgen/site/methodology.md" in names
    assert not any("/.venv/" in n or n.startswith("runs/") for n in names)


def test_wheel_ships_the_sites_defaults_from_their_one_source(wheel):
    """The top-level mkdocs.yml and the committed part of site_src/ (its assets), byte for byte; not the pages a
    build of the site generated there."""
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        assert whl.read("cardgen/site/defaults/mkdocs.yml") == (ROOT / "mkdocs.yml").read_bytes()
        assets = [p for p in (ROOT / "site_src" / "assets").rglob("*") if p.is_file()]
        assert assets, "site_src/assets/ is empty"
        for path in assets:
            rel = path.relative_to(ROOT).as_posix()
            assert whl.read(f"cardgen/site/defaults/{rel}") == path.read_bytes()
    shipped = {n for n in names if n.startswith("cardgen/site/defaults/")}
    assert len(shipped) == len(assets) + 1
