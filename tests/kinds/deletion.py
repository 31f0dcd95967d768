"""A copy of the checkout without one kind: its folder and its entry point removed (tests/kinds/test_deletion.py).

    python tests/kinds/deletion.py KIND DEST    # prints the copy's path; DEST is made anew
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def builtin_kinds() -> dict[str, str]:
    """cardgen's own kinds as pyproject.toml installs them: name -> the module its Kind lives in."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {name: ref.partition(":")[0] for name, ref in data["project"]["entry-points"]["cardgen.kinds"].items()}


def copy_without(kind: str, dest: Path) -> Path:
    """``dest``: the checkout's files (tracked and untracked, not ignored), less ``kind``'s folder and entry
    point."""
    module = builtin_kinds()[kind]
    if dest.exists():
        shutil.rmtree(dest)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    folder = module.replace(".", "/") + "/"
    for name in files:
        if not name or name.startswith(folder) or name.startswith("runs/"):
            continue
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    pyproject = dest / "pyproject.toml"
    text, n = re.subn(rf"^{re.escape(kind)} = \"{re.escape(module)}:\w+\"\n", "", pyproject.read_text(), flags=re.M)
    assert n == 1, f"no entry point for {kind} in pyproject.toml"
    pyproject.write_text(text)
    return dest


if __name__ == "__main__":
    print(copy_without(sys.argv[1], Path(sys.argv[2])))
