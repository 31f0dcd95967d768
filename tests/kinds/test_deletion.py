"""The test of the kind interface is deletion: a copy of the checkout with one built-in kind's folder and entry
point removed installs with ``make install``, imports every module, and builds a modelled card of a suite of the
other kinds (tests/kinds/deletion.py makes the copy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deletion import builtin_kinds, copy_without

pytestmark = pytest.mark.slow

# a small entry of each built-in kind: the suite of the others is every entry but the deleted kind's
ENTRIES = {
    "ingest": {"kind": "ingest", "min_prompt_tokens": 16, "max_prompt_tokens": 512, "points": 4},
    "closed": {"kind": "closed", "prompt_tokens": 128, "output_tokens": 16, "parallel": [1, 2], "min_requests": 4,
               "max_requests": 8},
    "waves": {"kind": "waves", "prompt_tokens": 128, "output_tokens": 16, "max_wave": 4},
    "open": {"kind": "open", "prompt_tokens": 128, "output_tokens": 16, "rates": [2], "num_requests": 8},
    "batch": {"kind": "batch", "prompt_tokens": 128, "output_tokens": 16, "batch_sizes": [1, 2], "runs": 2},
    "prefix": {"kind": "prefix", "prefix_tokens": 64, "suffix_tokens": 16, "output_tokens": 8, "prefixes": 2},
    "chat": {"kind": "chat", "users": 1, "conversations": 2, "turns": 2, "first_tokens": 32, "message_tokens": 8,
             "output_tokens": 8, "think_time_s": 0.1},
    "slo": {"kind": "slo", "load": "rate", "prompt_tokens": 128, "output_tokens": 16, "slo": {"ttft_p99_s": 2.0},
            "max_requests": 400},
    "depth": {"kind": "depth", "depths": [0, 1024], "prompt_tokens": 64, "output_tokens": 8, "repeats": 2},
    "images": {"kind": "images", "images": [1], "sides": [64], "prompt_tokens": 16, "output_tokens": 4,
               "requests": 2, "endpoint": "chat"},
    "structured": {"kind": "structured", "schemas": ["flat"], "prompt_tokens": 64, "output_tokens": 16,
                   "parallel": [1], "rounds": 1},
}

# every module of the package, each imported in turn (the load package patches the standard library with gevent
# first, as cardgen's own entry points do)
IMPORT_ALL = """
import gevent.monkey; gevent.monkey.patch_all()
import importlib, pkgutil, cardgen
bad = []
for m in pkgutil.walk_packages(cardgen.__path__, "cardgen."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except Exception as exc:
        bad.append(f"{m.name}: {type(exc).__name__}: {exc}")
print("\\n".join(bad))
raise SystemExit(1 if bad else 0)
"""


def test_every_builtin_kind_has_a_sample_entry():
    assert set(ENTRIES) == set(builtin_kinds())


def _without(kind: str, tmp_path: Path) -> None:
    copy = copy_without(kind, tmp_path / "checkout")
    make = subprocess.run(["make", "-s", "install"], cwd=copy, capture_output=True, text=True, timeout=600)
    assert make.returncode == 0, make.stderr[-2000:]
    python = copy / ".venv" / "bin" / "python"
    where = subprocess.run([python, "-c", "import cardgen; print(cardgen.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(copy), where  # the copy's own cardgen runs, not this one
    listed = subprocess.run([python, "-m", "cardgen", "kinds"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines()}
    assert names == set(builtin_kinds()) - {kind}, listed.stdout
    imported = subprocess.run([python, "-c", IMPORT_ALL], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, f"modules that need the deleted kind {kind!r}:\n{imported.stdout}"
    suite = tmp_path / "others.yaml"
    suite.write_text(yaml.safe_dump({"name": f"without-{kind}",
                                     "scenarios": [e for k, e in ENTRIES.items() if k != kind]}))
    out = tmp_path / "run"
    built = subprocess.run([python, "-m", "cardgen", "build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite",
                            str(suite), "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert {s["kind"] for s in summary["scenarios"]} == set(builtin_kinds()) - {kind}
    assert (out / "README.md").read_text().startswith("---\n")


# make test runs a module's tests on one worker (--dist loadscope), a class's apart: the kinds in two classes, so
# that the two cores each build half of the copies (each 20-35 s)
KINDS = sorted(builtin_kinds())


class TestDeletingOneOfTheFirstHalf:
    @pytest.mark.parametrize("kind", KINDS[: len(KINDS) // 2])
    def test_a_checkout_without_the_kind_installs_imports_and_builds_a_card(self, kind, tmp_path):
        _without(kind, tmp_path)


class TestDeletingOneOfTheSecondHalf:
    @pytest.mark.parametrize("kind", KINDS[len(KINDS) // 2:])
    def test_a_checkout_without_the_kind_installs_imports_and_builds_a_card(self, kind, tmp_path):
        _without(kind, tmp_path)
