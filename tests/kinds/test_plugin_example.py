"""The example kind (tests/kinds/plugin_example, README "Writing a kind") installed as its own package: the
registry finds it through its entry point, ``cardgen kinds`` lists it, and a modelled build of a suite that uses
it writes its own result into summary.json and its own section into the card, rendered again from the files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cardgen.kinds import KINDS

EXAMPLE = Path(__file__).resolve().parent / "plugin_example"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The example installed (a wheel built from its pyproject.toml, as pip installs any package) into a folder of
    its own: the environment of a cardgen that has it on its path."""
    target = tmp_path_factory.mktemp("plugin")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(EXAMPLE)], check=True, timeout=300)
    return {**os.environ, "PYTHONPATH": str(target)}


def cardgen(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cardgen", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_the_kind_is_found_through_its_entry_point_and_listed(installed, tmp_path):
    done = cardgen(installed, "kinds", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("outsweep "))
    assert "cardgen-outsweep 0.1.0, cardgen_outsweep" in line and "decode speed" in line
    assert {name for name in KINDS} <= {x.split()[0] for x in done.stdout.splitlines()}  # the built-in ones too
    bare = cardgen({k: v for k, v in installed.items() if k != "PYTHONPATH"}, "kinds", cwd=tmp_path)
    assert "outsweep" not in bare.stdout  # not installed, not a kind


def test_a_card_built_with_the_kind_has_its_result_and_its_section(installed, tmp_path):
    out = tmp_path / "run"
    done = cardgen(installed, "build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(EXAMPLE / "suite.yaml"),
                   "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    result = summary["kinds"]["outsweep"]
    assert result["version"] == 1 and result["requests"] == 8 and result["failed"] == 0
    assert [row["output_tokens"] for row in result["lengths"]] == [16, 64, 128, 256]
    # the slope is the decode speed: the closed point at 1 parallel of the same run decodes at the same speed
    closed = next(s for s in summary["scenarios"] if s["kind"] == "closed")
    assert result["decode_tok_s"] == pytest.approx(closed["decode_tok_s"]["p50"], rel=0.03)
    card = (out / "README.md").read_text()
    assert "## Decode speed of a lone request (output-length sweep)" in card
    assert f"**{result['decode_tok_s']:,.1f} tok/s**" in card
    # the section is rendered from the run's files alone: the same bytes again
    again = cardgen(installed, "render", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (out / "README.md").read_text() == card
    # a cardgen without the kind still renders the run: the result it cannot read stays in summary.json, unshown
    bare = cardgen({k: v for k, v in installed.items() if k != "PYTHONPATH"}, "render", str(out), cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert "Decode speed of a lone request" not in (out / "README.md").read_text()


def test_a_suite_naming_a_kind_not_installed_is_a_one_line_error(installed, tmp_path):
    bare = {k: v for k, v in installed.items() if k != "PYTHONPATH"}
    done = cardgen(bare, "build", "CodeLlama-7b", "--suite", str(EXAMPLE / "suite.yaml"), "--out",
                   str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "outsweep" in done.stderr, done.stderr
