"""The card says how each point ran: why it stopped, the points that were not run, the requests a closed loop
left out as ramp and drain, the precision each point reached, and the superseded records of a resumed run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cardgen.card import render_run
from cardgen.card.sections.point_text import precision_text, stop_text
from cardgen.rundir import CARD_MD, REQUESTS_JSONL, RUN_JSON, SUMMARY_JSON
from cardgen.schemas.summary import PointPrecision, ScenarioSummary

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "run_small"
SATURATING, SKIPPED, RERUN = "closed-in128-out32-p4", "closed-in128-out32-p10", "closed-in1024-out128-p4"


@pytest.fixture(scope="module")
def card(tmp_path_factory) -> tuple[str, dict]:
    """The committed run as a resumed one whose 128 / 32 pair saturated at 4 parallel: 10 parallel not run, and
    the 1024 / 128 point at 4 parallel rerun after a cut-off first attempt."""
    run = tmp_path_factory.mktemp("points") / "run"
    shutil.copytree(FIXTURE, run)
    records = [json.loads(x) for x in (run / REQUESTS_JSONL).read_text().splitlines()]
    kept = []
    for r in records:
        if r["scenario"] == SKIPPED:
            continue
        if r["scenario"] == RERUN:
            kept.append({**r, "attempt": 1})
        kept.append(r)
    (run / REQUESTS_JSONL).write_text("".join(json.dumps(r) + "\n" for r in kept))
    info = json.loads((run / RUN_JSON).read_text())
    points = {p["name"]: p for p in info["points"]}
    points[SATURATING].update(stop="saturated", detail="KV cache 97% full", saturation="KV cache 97% full")
    points[SKIPPED].update(stop="skipped", started_unix=None, ended_unix=None, requests=0,
                           detail=f"{SATURATING} saturated the server (KV cache 97% full)")
    points[RERUN]["attempt"] = 1
    points["ingest"].update(client_kept_up=True, client="kept up: event-loop lag p95 1.0 ms, CPU max 40 %")
    points[SATURATING].update(client_kept_up=False, client="fell behind: CPU max 97 % (limits: ...)")
    (run / RUN_JSON).write_text(json.dumps(info))
    render_run(run)
    return (run / CARD_MD).read_text("utf-8"), json.loads((run / SUMMARY_JSON).read_text())


def row(text: str, first_cell: str) -> list[str]:
    """The first table row whose first cell is ``first_cell`` (the main metrics table comes before the modelled
    card's expected-error table, which has the same first cells)."""
    line = next(x for x in text.splitlines() if x.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def scenario_rows(text: str) -> dict[str, dict[str, str]]:
    """The card's scenario table: per scenario, its cells by column."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("| Scenario |") and "Stopped" in x)
    columns = [c.strip() for c in lines[start].strip("|").split(" | ")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = dict(zip(columns, cells, strict=True))
    return rows


def test_scenario_table_says_why_each_point_stopped(card):
    text, summary = card
    rows = scenario_rows(text)
    assert list(rows) == [s["scenario"] for s in summary["scenarios"]]  # suite order, the skipped point included
    assert list(rows[SKIPPED])[-4:] == ["Duration", "Precision", "Stopped", "Client"]
    skipped = rows[SKIPPED]
    assert skipped["Stopped"] == "not run: the server saturated at 4 parallel (KV cache 97% full)"
    assert skipped["Requests"] == "0" and skipped["req/s"] == "—" and skipped["Precision"] == "—"
    assert rows[SATURATING]["Stopped"] == "saturated: KV cache 97% full"
    assert rows["ingest"]["Stopped"] == "complete"
    # whether the load generator kept up, as run.json says per point (unknown: a dash)
    assert rows["ingest"]["Client"] == "kept up: event-loop lag p95 1.0 ms, CPU max 40 %"
    assert rows[SATURATING]["Client"].startswith("fell behind: CPU max 97 %") and rows[SKIPPED]["Client"] == "—"
    by_name = {x["scenario"]: x for x in summary["scenarios"]}
    assert by_name["ingest"]["client_kept_up"] is True and by_name[SATURATING]["client_kept_up"] is False
    assert rows[RERUN]["Stopped"] == "precision reached: within +-5%"  # the fixture's target_ci
    assert rows["closed-in128-out32-p1"]["Stopped"] == "minimum reached"  # no target
    for s in summary["scenarios"]:
        assert s["stop"] is not None and "stop_detail" in s
        assert rows[s["scenario"]]["Requests"] == str(s["requests"])


def test_pair_section_lists_the_points_that_were_not_run(card):
    text, _ = card
    section = text[text.index("### 128 prompt tokens, 32 generated tokens"):]
    section = section[:section.index("###", 4)]
    assert "Not run:\n\n- 10 parallel: the server saturated at 4 parallel (KV cache 97% full)\n" in section
    assert "| 10 |" not in section  # no row of figures for it


def test_ramp_drain_and_precision_columns(card):
    text, summary = card
    rows = scenario_rows(text)
    by = {s["scenario"]: s for s in summary["scenarios"]}
    p1 = rows["closed-in128-out32-p1"]
    # one user: the first request is the ramp; the last ended as the point stopped, so no drain
    assert p1["Ramp / drain left out"] == str(by["closed-in128-out32-p1"]["ramp_drain_requests"]) == "1"
    assert p1["Precision"].startswith("±") and " / ±" in p1["Precision"]
    short = rows["closed-in128-out32-p4"]  # two rounds: the ramp and the drain
    assert short["Ramp / drain left out"] == "0 (too short)" and short["Precision"] == "—"
    assert rows["ingest"]["Precision"].endswith("(slope)")
    assert rows["batch-in128-out16-b8"]["Precision"].endswith("(mean decode)")
    assert rows["open-in256-out32-r4"]["Ramp / drain left out"] == "—"


def test_superseded_records_are_said_and_not_counted(card):
    text, summary = card
    rerun = sum(1 for line in (FIXTURE / REQUESTS_JSONL).read_text().splitlines()
                if json.loads(line)["scenario"] == RERUN)
    assert rerun > 0 and summary["superseded_requests"] == rerun
    assert f"{rerun} superseded records of cut-off attempts are kept on disk, not counted." in text
    assert f"| Superseded records (kept on disk, not counted) | {rerun} |" in text
    assert row(text, "Requests (failed)")[1] == f"{summary['requests_total']} (0)"


def test_main_metrics_give_the_precision_reached(card):
    text, summary = card
    ingestion = row(text, "Prompt ingestion speed")
    assert ingestion[3] == f"±{summary['headline_precision']['prompt_ingestion_tok_s'] * 100:.1f} %"
    fit = summary["ingestion"]
    assert fit["tok_s_slope_ci_low"] < fit["tok_s"] < fit["tok_s_slope_ci_high"]
    assert row(text, "KV cache capacity")[3] == "exact"  # declared by the server
    assert summary["headline_precision"]["kv_cache_tokens"] == 0.0


def test_method_states_the_rules_once(card):
    text, _ = card
    method = text[text.index("## Method"):]
    for phrase in ("Steady state (closed loop)", "batch means over whole rounds", "at most 20 batches",
                   "`max_requests` or `max_duration_s`", "`stop_at_saturation` does not run them",
                   "then\nbisect", "superseded"):
        assert phrase in method, phrase
    assert method.count("Steady state (closed loop)") == 1


def test_precision_and_stop_texts():
    closed = ScenarioSummary(scenario="c", kind="closed", prompt_tokens=1, output_tokens=1, parallel=8, requests=80,
                             stop="precision reached", stop_detail="within +-3%", target_ci=0.03,
                             precision=PointPrecision(method="batch means", speed_from_start=0.0183, ttft=0.024))
    assert precision_text(closed) == "±1.8 % / ±2.4 %; target ±3.0 %"
    assert stop_text(closed) == "precision reached: within +-3%"
    never = ScenarioSummary(scenario="n", kind="closed", prompt_tokens=1, output_tokens=1, parallel=16)
    assert stop_text(never) == "not run"
    skipped = never.model_copy(update={"stop": "skipped", "stop_detail": "not run: the server saturated at 8"})
    assert stop_text(skipped) == "not run: the server saturated at 8"
