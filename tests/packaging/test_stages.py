"""make test's stages select tests by marker; the engine stage collects tests/engines alone (collecting every test
module takes about 11.5 s, that folder 2.8 s), so a test marked ``engine`` anywhere else would never run there."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MARK = "pytest.mark." + "engine"  # as the test modules write it (split here, so this file does not hold it)


def _marked() -> list[Path]:
    return [p for p in TESTS.rglob("*.py") if MARK in p.read_text("utf-8")]


def test_every_engine_test_lives_in_tests_engines():
    elsewhere = [p.relative_to(TESTS).as_posix() for p in _marked() if (TESTS / "engines") not in p.parents]
    assert elsewhere == [], f"marked engine outside tests/engines, which make test's engine stage never collects: {elsewhere}"


def test_the_rule_reads_the_marker_as_the_engine_tests_write_it():
    assert len([p for p in _marked() if p.name.startswith("test_engine_")]) >= 5
