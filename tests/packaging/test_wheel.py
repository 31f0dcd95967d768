"""The installed package must carry what it needs at run time: templates, suites, presets, site assets."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_templates_suites_and_data(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("cardgen-*.whl"))
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
