"""``python tests/bench/compare_runs.py A B``: the files of two run directories, byte for byte (run.json as
published: without the writer's pid, host and heartbeat; summary.json without its version fields). How issue 40's
"the same answers" was checked: the same suite built before and after, from the same start time."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from cardgen.hub.plan import published_run_json

VERSIONS = ("version", "cardgen_version", "schema_version")


def unversioned(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: unversioned(v) for k, v in x.items() if k not in VERSIONS}
    if isinstance(x, list):
        return [unversioned(v) for v in x]
    return x


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(a: Path, b: Path) -> int:
    names = sorted({p.relative_to(a) for p in a.rglob("*") if p.is_file()}
                   | {p.relative_to(b) for p in b.rglob("*") if p.is_file()})
    differ = 0
    for name in names:
        pa, pb = a / name, b / name
        if not pa.exists() or not pb.exists():
            print(f"only in one: {name}")
            differ += 1
            continue
        if name.name == "run.json":
            same = published_run_json(pa) == published_run_json(pb)
        elif name.name == "summary.json":
            same = unversioned(json.loads(pa.read_text())) == unversioned(json.loads(pb.read_text()))
        else:
            same = digest(pa) == digest(pb)
        print(f"{'same' if same else 'DIFFERENT'}  {name}")
        differ += not same
    print("IDENTICAL" if not differ else f"{differ} files differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
