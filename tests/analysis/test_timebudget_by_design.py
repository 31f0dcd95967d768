"""What a kind does by design is no finding: the time budget's note names a part that takes most of a point's TTFT
only where the point's kind does not make it large on purpose (``Kind.by_design``: waves fill the server to find
where it queues); the table still shows it, marked "by design". And the engine's own ingestion speed is read
wherever the engine gives its prefill time: per request, or only as vLLM's prefill histogram over a window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clirun import cardgen

from cardgen.analysis import analyse, load_run
from cardgen.analysis.timebudget import time_budgets
from cardgen.card.sections.time_budget import dominant_notes, engine_ingestion, time_budget_table
from cardgen.kinds import kind_of
from cardgen.rundir import REQUESTS_JSONL
from cardgen.schemas.summary import ScenarioSummary

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "run_small"  # vLLM's histograms, no per-request metrics


def _requests(scenario: str, n: int, *, queue_ms: float, prompt_ms: float) -> pd.DataFrame:
    """``n`` requests of ``scenario`` as vLLM's per-request metrics account for them: TTFT = queue + prompt."""
    ttft_s = (queue_ms + prompt_ms) / 1000
    return pd.DataFrame({
        "scenario": scenario, "ok": True, "warmup": False, "ttft_s": ttft_s, "e2e_s": ttft_s + 0.31,
        "tpot_s": 0.01, "output_tokens": 32, "prompt_tokens": 1024, "cached_tokens": np.nan,
        "engine_source": "metrics", "engine_queue_ms": queue_ms, "engine_prompt_ms": prompt_ms,
        "engine_prompt_n": np.nan, "engine_predicted_ms": 310.0}, index=range(n))


def _point(scenario: str, kind: str) -> ScenarioSummary:
    return ScenarioSummary(scenario=scenario, kind=kind, prompt_tokens=1024, output_tokens=32, parallel=8)


def test_the_kinds_that_queue_on_purpose_say_so():
    assert "queue" in kind_of("waves").by_design  # its waves fill the server until it queues
    assert "queue" not in kind_of("closed").by_design  # a closed loop's queue is a finding


@pytest.mark.parametrize("kind, named", [("waves", False), ("closed", True)])
def test_a_queue_of_94_percent_is_named_only_where_the_kind_does_not_make_it(kind, named):
    requests = _requests("p", 10, queue_ms=940.0, prompt_ms=60.0)
    tb = time_budgets(requests, {}, [_point("p", kind)], engine="vllm")
    (b,) = tb.points
    assert b.part("queue").share == pytest.approx(0.94)
    notes = dominant_notes(tb)
    if named:
        assert b.dominant == "queue" and b.by_design is None
        assert len(notes) == 1 and notes[0].startswith("Queue takes most of the time to first token at p (up to 94")
        assert "max_num_seqs" in notes[0]  # the setting that usually causes it
    else:
        assert b.dominant is None and b.hint is None and b.by_design == "queue"
        assert notes == []
    table = time_budget_table(tb)
    queue = table.rows[0][table.columns.index("Queue")]
    assert queue == ("940 ms (94.0 %)" if named else "940 ms (94.0 %, by design)")


def test_the_run_names_a_part_only_where_points_that_do_not_make_it_large_show_it():
    calm_closed = _requests("c", 100, queue_ms=10.0, prompt_ms=90.0)
    waves = _requests("w", 400, queue_ms=4000.0, prompt_ms=300.0)
    scenarios = [_point("c", "closed"), _point("w", "waves")]
    tb = time_budgets(pd.concat([calm_closed, waves], ignore_index=True), {}, scenarios, engine="vllm")
    assert tb.run.part("queue").share > 0.9  # the waves' requests are most of the run's
    assert tb.run.dominant is None and tb.run.by_design == "queue" and dominant_notes(tb) == []
    queued_closed = _requests("c", 100, queue_ms=900.0, prompt_ms=90.0)
    tb = time_budgets(pd.concat([queued_closed, waves], ignore_index=True), {}, scenarios, engine="vllm")
    assert tb.run.dominant == "queue" and tb.run.by_design is None
    assert [b.scope for b in tb.points if b.dominant] == ["c"]


def test_the_engines_ingestion_from_vllms_prefill_histogram_alone():
    """The committed run's server exposes vLLM's histograms and counters, no per-request metrics: the engine's
    ingestion speed is its prompt-token counter over the sweep's window / the rise of its prefill histogram's sum."""
    a = analyse(load_run(FIXTURE))
    s = a.summary
    requests = a.requests
    assert requests[requests["scenario"] == "ingest"]["engine_source"].eq("").all()  # no per-request account
    ingest = s.time_budget.of("ingest")
    assert ingest is not None and ingest.engine_prompt_tok_s is not None
    assert "vllm:request_prefill_time_seconds" in ingest.engine_prompt_method
    assert "vllm:prompt_tokens_total" in ingest.engine_prompt_method
    # the client's slope carries only what is proportional to the prompt: the engine's speed is the same to a few %
    assert ingest.engine_prompt_tok_s == pytest.approx(s.ingestion.tok_s, rel=0.05)
    line = engine_ingestion(s.time_budget, s.ingestion, s.scenarios)
    assert line is not None and line.startswith("The engine's own ingestion speed: ")
    assert "vllm:request_prefill_time_seconds" in line and "the client's is " in line


SUITE = """name: by-design
scenarios:
  - kind: ingest
    prompt_tokens: [128, 512, 1024, 2048]
    output_tokens: 1
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 32
    max_wave: 16
"""


@pytest.mark.slow  # a whole run: not in make test-fast
def test_the_histogram_gives_the_same_ingestion_as_the_per_request_account(tmp_path):
    """The virtual server streams vLLM's per-request metrics and exposes its histograms: with the per-request
    account left out of the records, the window's histogram gives the same speed over the same requests."""
    (tmp_path / "suite.yaml").write_text(SUITE, "utf-8")
    run = tmp_path / "run"
    proc = cardgen("build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "suite.yaml"), "--out",
                   str(run), "--no-card")
    assert proc.returncode == 0, proc.stderr
    per_request = analyse(load_run(run)).summary.time_budget
    lines = (run / REQUESTS_JSONL).read_text("utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert any(r.get("engine_timings") for r in records)
    (run / REQUESTS_JSONL).write_text("".join(json.dumps({k: v for k, v in r.items() if k != "engine_timings"}) + "\n"
                                              for r in records), "utf-8")
    histogram = analyse(load_run(run)).summary.time_budget
    a, b = per_request.of("ingest"), histogram.of("ingest")
    assert "per-request" not in " ".join(histogram.sources)
    assert a.engine_prompt_method.startswith("prompt tokens it computed / its prompt compute")
    assert "vllm:request_prefill_time_seconds" in b.engine_prompt_method
    assert b.engine_prompt_tok_s == pytest.approx(a.engine_prompt_tok_s, rel=1e-6)
    waves = histogram.of("waves-in1024-out32")
    assert waves.part("queue").share > 0.5 and waves.by_design == "queue" and waves.dominant is None
