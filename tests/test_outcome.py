"""One request's figures (cardgen.outcome.RequestFigures): their edge cases, one definition for every reader.

The analysis, the SLO verdict, the precision stops, the kinds' judges and Locust's stats event take a
request's figures from :meth:`RequestFigures.of`; outside cardgen/outcome.py no package code subtracts a
request's stamps (``first_token_at - sent_at``, ``end_at - sent_at``...) to make a latency of its own.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from cardgen.analysis.requests import request_row
from cardgen.outcome import Outcome, RequestFigures, chunk_gaps_s
from cardgen.precision import closed_figures, round_decode_speed
from cardgen.schemas.records import ErrorKind, RequestRecord
from cardgen.slo import latencies

PACKAGE = Path(__file__).resolve().parents[1] / "cardgen"
OWNER = "outcome.py"  # the one module that computes a request's figures from its stamps
STAMPS = frozenset({"sent_at", "first_token_at", "end_at", "first_answer_at", "chunk_times"})


def outcome(*, ok: bool = True, sent: float = 10.0, first: float | None = 10.5, end: float | None = 12.5,
            out: int | None = 5, chunks: tuple[float, ...] = (10.5, 11.0, 11.5, 12.0, 12.5)) -> Outcome:
    return Outcome(ok=ok, sent_at=sent, first_token_at=first, end_at=end, prompt_tokens=100,
                   output_tokens=out, chunk_times=chunks)


def test_a_successful_requests_figures():
    f = RequestFigures.of(outcome())
    assert f.ok and f.end_at == 12.5 and f.elapsed_s == 2.5
    assert f.ttft_s == 0.5 and f.e2e_s == 2.5
    assert f.tpot_s == pytest.approx(0.5) and f.decode_tok_s == pytest.approx(2.0)
    assert f.speed_from_start_tok_s == pytest.approx(2.0)
    assert f.itl_s == (0.5, 0.5, 0.5, 0.5)


def test_a_failed_request_has_no_latency_only_the_time_it_took():
    f = RequestFigures.of(outcome(ok=False))
    assert not f.ok and f.elapsed_s == 2.5
    assert all(math.isnan(x) for x in (f.ttft_s, f.e2e_s, f.tpot_s, f.decode_tok_s, f.speed_from_start_tok_s))
    assert f.itl_s == ()


def test_an_end_never_recorded_falls_back_to_the_last_chunk():
    f = RequestFigures.of(outcome(end=None))
    assert f.end_at == 12.5 and f.e2e_s == 2.5
    g = RequestFigures.of(outcome(end=None, first=None, chunks=()))
    assert math.isnan(g.end_at) and math.isnan(g.e2e_s) and math.isnan(g.elapsed_s)
    assert math.isnan(g.ttft_s) and math.isnan(g.speed_from_start_tok_s)


def test_a_one_token_answer_has_no_tpot_but_a_speed_from_start():
    f = RequestFigures.of(outcome(out=1, end=10.5, chunks=(10.5,)))
    assert math.isnan(f.tpot_s) and math.isnan(f.decode_tok_s)
    assert f.speed_from_start_tok_s == pytest.approx(2.0) and f.itl_s == ()


def test_a_decode_time_of_zero_gives_no_tpot_rather_than_zero():
    f = RequestFigures.of(outcome(out=5, end=10.5, chunks=(10.5,)))
    assert math.isnan(f.tpot_s) and math.isnan(f.decode_tok_s)
    assert f.speed_from_start_tok_s == pytest.approx(10.0)


def test_no_token_count_gives_no_speed_and_no_tpot():
    for out in (None, 0):
        f = RequestFigures.of(outcome(out=out))
        assert f.ttft_s == 0.5 and f.e2e_s == 2.5
        assert math.isnan(f.speed_from_start_tok_s) and math.isnan(f.tpot_s) and math.isnan(f.decode_tok_s)


def test_a_record_and_its_outcome_have_the_same_figures():
    rec = RequestRecord(scenario="s", kind="closed", prompt_tokens_target=100, output_tokens_target=5,
                        sent_at=10.0, first_token_at=10.5, chunk_times=[10.5, 11.0, 12.5], end_at=12.6,
                        output_tokens=5)
    assert RequestFigures.of(rec) == RequestFigures.of(Outcome.of(rec))
    failed = rec.model_copy(update={"error": "boom", "error_kind": ErrorKind.TIMEOUT})
    gone = RequestFigures.of(failed)
    assert gone.elapsed_s == pytest.approx(2.6) and math.isnan(gone.ttft_s)


def test_an_outcomes_figures_are_computed_once_for_every_rule_that_reads_them(monkeypatch):
    made = []
    real = RequestFigures.from_stamps
    monkeypatch.setattr(RequestFigures, "from_stamps", lambda **kw: made.append(1) or real(**kw))
    o = outcome()
    first = RequestFigures.of(o)
    assert RequestFigures.of(o) is first and o.figures is first and latencies(o)["ttft"] == [first.ttft_s]
    assert len(made) == 1
    assert first == real(ok=True, sent_at=10.0, first_token_at=10.5, end_at=12.5, output_tokens=5,
                         chunk_times=(10.5, 11.0, 11.5, 12.0, 12.5))
    assert o == outcome() and hash(o) == hash(outcome())  # what it computed is no part of what it is


def test_the_analysis_the_slo_and_the_stops_read_the_same_figures():
    rec = RequestRecord(scenario="s", kind="closed", prompt_tokens_target=100, output_tokens_target=5,
                        sent_at=10.0, first_token_at=10.5, chunk_times=[10.5, 11.0, 12.5], end_at=12.6,
                        output_tokens=5)
    f = RequestFigures.of(rec)
    row = request_row(rec)
    assert (row["ttft_s"], row["e2e_s"], row["tpot_s"]) == (f.ttft_s, f.e2e_s, f.tpot_s)
    assert (row["decode_tok_s"], row["speed_from_start_tok_s"]) == (f.decode_tok_s, f.speed_from_start_tok_s)
    said = latencies(Outcome.of(rec))
    assert said == {"ttft": [f.ttft_s], "e2e": [f.e2e_s], "tpot": [f.tpot_s], "itl": list(f.itl_s)}
    assert round_decode_speed([Outcome.of(rec)]) == f.decode_tok_s
    one_user = [outcome(sent=3.0 * i, first=3.0 * i + 0.5, end=3.0 * i + 2.5, chunks=()) for i in range(12)]
    speeds, ttfts = closed_figures(one_user, running=False, parallel=1)
    assert speeds == [RequestFigures.of(one_user[1]).speed_from_start_tok_s] * 11  # the first is the ramp
    assert ttfts == [RequestFigures.of(one_user[1]).ttft_s] * 11


def test_the_slo_counts_a_failure_as_a_miss_on_top_of_the_figures():
    miss = {"ttft": [math.inf], "tpot": [math.inf], "e2e": [math.inf], "itl": [math.inf]}
    assert latencies(outcome(ok=False)) == miss
    assert latencies(outcome(first=None)) == miss  # no TTFT: nothing to judge it on
    assert latencies(outcome(out=1, end=10.5, chunks=(10.5,)))["tpot"] == []  # a one-token answer: no TPOT


def test_chunk_gaps_are_the_differences_of_arrivals():
    assert chunk_gaps_s([1.0, 1.5, 3.0]).tolist() == [0.5, 1.5]
    assert chunk_gaps_s([]).size == 0 and chunk_gaps_s([2.0]).size == 0


# --- no second copy -----------------------------------------------------------------------------------------


def _is_stamp(node: ast.expr) -> bool:
    """A request's stamp: a name, an attribute or a column (``["end_at"]``) of :data:`STAMPS`."""
    if isinstance(node, ast.Name):
        return node.id in STAMPS
    if isinstance(node, ast.Attribute):
        return node.attr in STAMPS
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in STAMPS
    return False


def _stamp_latencies(source: str) -> list[int]:
    """The lines of ``source`` that subtract one stamp from another (``r.end_at - r.sent_at``)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
                  and _is_stamp(node.left) and _is_stamp(node.right))


def test_the_scanner_sees_each_form():
    src = ('a = r.first_token_at - r.sent_at\nb = end_at - ex.sent_at\nc = row["end_at"] - row["sent_at"]\n'
           'd = r.end_at - since\ne = r.sent_at + timeout\nf = rec.first_answer_at - rec.sent_at')
    assert _stamp_latencies(src) == [1, 2, 3, 6]


def test_only_the_outcome_module_computes_a_requests_latencies_from_its_stamps():
    found = {name: lines for path in sorted(PACKAGE.rglob("*.py"))
             if (name := path.relative_to(PACKAGE).as_posix()) != OWNER
             and (lines := _stamp_latencies(path.read_text("utf-8")))}
    assert not found, f"take a request's figures from cardgen.outcome.RequestFigures.of(r) instead: {found}"
