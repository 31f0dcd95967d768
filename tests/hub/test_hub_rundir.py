"""``cardgen push`` reads the run through RunDir, not through the site's loader: a newer or incomplete run is
refused in one line naming the file, before anything is planned or sent."""

from __future__ import annotations

import json

import pytest

import cardgen.site.runs
from cardgen.cli.main import main
from cardgen.rundir import CARD_MD, SUMMARY_JSON, RunDir
from cardgen.schemas import SUMMARY_SCHEMA_VERSION
from cardgen.site.sample import write_sample_run


def push(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(["push", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def no_site_loader(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the hub must not load runs through cardgen.site")

    monkeypatch.setattr(cardgen.site.runs, "load_run", forbidden)
    monkeypatch.setattr(cardgen.site.runs, "gather_runs", forbidden)


def test_push_loads_the_run_through_rundir(tmp_path, capsys, monkeypatch, no_site_loader):
    run = write_sample_run(tmp_path)
    seen = []
    load_summary = RunDir.load_summary
    monkeypatch.setattr(RunDir, "load_summary", lambda self: seen.append(self.path) or load_summary(self))
    code, out, err = push(capsys, str(run), "--repo", "org/model", "--dataset", "org/runs", "--dry-run")
    assert code == 0, err
    assert seen == [run] and "Dry run: nothing was sent." in out


def test_push_of_a_run_from_a_newer_cardgen_is_one_line(tmp_path, capsys, no_site_loader):
    run = write_sample_run(tmp_path)
    data = json.loads((run / SUMMARY_JSON).read_text()) | {"schema_version": SUMMARY_SCHEMA_VERSION + 1}
    (run / SUMMARY_JSON).write_text(json.dumps(data))
    code, out, err = push(capsys, str(run), "--repo", "org/model", "--dry-run")
    assert code == 5 and out == ""
    assert err.strip() == (f"cardgen: error: {run / SUMMARY_JSON} was written by a newer cardgen (schema "
                           f"{SUMMARY_SCHEMA_VERSION + 1}; this one reads up to {SUMMARY_SCHEMA_VERSION}): "
                           "upgrade cardgen")


def test_push_without_a_card_names_the_missing_file(tmp_path, capsys, no_site_loader):
    run = write_sample_run(tmp_path)
    (run / CARD_MD).unlink()
    code, _, err = push(capsys, str(run), "--dataset", "org/runs", "--dry-run")
    assert code == 5 and len(err.strip().splitlines()) == 1
    assert f"{run} has no README.md (the card): render it with 'cardgen render {run}'" in err
