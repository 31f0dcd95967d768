"""The package stands on its own: the wheel, installed into a fresh environment, builds a card and then the site
in an empty directory, with the site's defaults it carries; a project's own mkdocs.yml still overrides them.

The fresh environment reuses this one's dependencies (a ``.pth`` line naming its site-packages: no network) but
not its cardgen: the wheel is installed into the new site-packages, which comes first, and the editable install's
own ``.pth`` is not read from a directory a ``.pth`` line adds. The test checks where cardgen is imported from."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.stdout[-1500:]}{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture
def installed(wheel: Path, tmp_path: Path) -> Path:
    """A new virtualenv holding the wheel's cardgen (its ``bin``), this one's dependencies under it."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}).strip())
    (purelib / "zz_project_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # --ignore-installed: the project's editable cardgen is visible through the .pth line; pip must neither
    # take it for this one nor try to remove it
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         "--ignore-installed", "--disable-pip-version-check", str(wheel)], cwd=tmp_path, env=dict(os.environ))
    return env_dir


def test_the_installed_wheel_builds_a_card_and_the_site_in_an_empty_directory(installed, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    env = {"PATH": f"{installed / 'bin'}:/usr/bin:/bin", "HOME": str(work), "MPLBACKEND": "Agg",
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "NO_MKDOCS_2_WARNING": "1"}
    where = run(["python", "-c", "import cardgen, cardgen.site.config as c; print(cardgen.__file__);"
                 " print(c.own_config())"], cwd=work, env=env).split()
    assert all(Path(p).is_relative_to(installed) for p in where), (where, installed)

    run(["cardgen", "build", "CodeLlama-7b", "--suite", "quick"], cwd=work, env=env)
    [card] = work.glob("runs/*/*/README.md")
    out = run(["cardgen", "site"], cwd=work, env=env)
    assert "Built site/ from 1 runs" in out
    page = work / "site" / "runs" / card.parent.parent.name / card.parent.name.lower() / "index.html"
    assert page.is_file(), sorted(p.relative_to(work).as_posix() for p in (work / "site").rglob("*.html"))
    assert "CodeLlama-7b" in page.read_text("utf-8")
    assert (work / "site" / "assets" / "leaderboard.js").read_bytes() == \
        (ROOT / "site_src" / "assets" / "leaderboard.js").read_bytes()
    assert "<title>Leaderboard - cardgen reports</title>" in (work / "site" / "index.html").read_text("utf-8")

    # a project's own config, in the current directory, overrides cardgen's
    own = (ROOT / "mkdocs.yml").read_text("utf-8")
    (work / "mkdocs.yml").write_text(own.replace("site_name: cardgen reports", "site_name: our own reports"))
    run(["cardgen", "site", "--out", "ours"], cwd=work, env=env)
    assert "<title>Leaderboard - our own reports</title>" in (work / "ours" / "index.html").read_text("utf-8")
