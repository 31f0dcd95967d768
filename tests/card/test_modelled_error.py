"""A modelled card states the virtual server's expected error next to each headline (issue 12)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.card.context import card_context
from cardgen.sim.catalog import read_data

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "run_small"  # a modelled run


@pytest.fixture()
def run(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def _context(run_dir: Path):
    return card_context(analyse(load_run(run_dir)), date="2026-09-22")


def test_modelled_run_without_a_record_shows_the_current_calibration(run) -> None:
    err = _context(run)["modelled_error"]
    assert err is not None and not err["recorded"]
    rows = {r[0]: r for r in err["table"].rows}
    assert list(rows) == ["Prompt ingestion speed", "Generation speed per request (10 parallel, 1024 → 128)",
                          "KV cache capacity"]
    kv = read_data("expected_error.yaml")["figures"]["kv_tokens"]
    assert rows["KV cache capacity"][2] == f"±{kv['median_abs_pct']:.0f} %"
    assert rows["KV cache capacity"][5] == f"{kv['within_target']} of {kv['rows']}"


def test_the_error_the_run_recorded_wins(run) -> None:
    info = json.loads((run / "run.json").read_text("utf-8"))
    info["sim"].setdefault("perf", {})["expected_error"] = {"target_pct": 15.0, "figures": {
        "kv_tokens": {"label": "KV", "rows": 4, "within_target": 3, "median_abs_pct": 10.0, "max_abs_pct": 40.0}}}
    (run / "run.json").write_text(json.dumps(info), "utf-8")
    err = _context(run)["modelled_error"]
    assert err is not None and err["recorded"]
    (row,) = err["table"].rows
    assert row[0] == "KV cache capacity" and row[2] == "±10 %" and row[4] == "±40 %" and row[5] == "3 of 4"
    # 113,200 modelled tokens with a 10 % error: the real capacity likely 113,200 / 1.1 to 113,200 / 0.9
    assert row[3] == "103,000 tokens – 126,000 tokens"


def test_measured_run_states_no_model_error(run) -> None:
    info = json.loads((run / "run.json").read_text("utf-8"))
    info["modelled"] = False
    (run / "run.json").write_text(json.dumps(info), "utf-8")
    analysis = analyse(load_run(run))
    assert not analysis.summary.modelled
    assert card_context(analysis, date="2026-09-22")["modelled_error"] is None
