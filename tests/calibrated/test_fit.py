"""The fit on figures whose dependence on the constants is known exactly: it recovers them, holds a constant no
figure sees at its start with a wide interval, and a figure no constant can explain does not drag the rest."""

from __future__ import annotations

import math

import pytest

from cardgen.calibrated.fit import Target, fit, targets
from cardgen.calibrated.perf import NAMES, Constants

TRUE = Constants((2e14, 1.5e12, 0.004, 0.0002, 0.002))
START = Constants((1e14, 3e12, 0.001, 0.00005, 0.001))


def figures(c: Constants, *, see_request: bool = True) -> dict[str, dict[str, float]]:
    """A toy server: TTFT of a prompt is its FLOPs / compute rate + step overhead (+ request overhead); a decode
    step reads 14 GB of weights plus each sequence's KV cache (50 MB, or 2 GB over a long context) and costs the
    overheads."""
    out: dict[str, dict[str, float]] = {"ingest": {}}
    for n in (100, 1000, 2000, 4000):
        ttft = n * 1.4e10 / c["compute_flop_s"] + c["step_overhead_s"]
        out["ingest"][f"ttft_s@{n}"] = ttft + (c["request_overhead_s"] if see_request else 0.0)
    for batch, kv in ((1, 5e7), (8, 5e7), (32, 5e7), (4, 2e9)):
        step = (1.4e10 + kv * batch) / c["bandwidth_byte_s"] + c["step_overhead_s"] + c["per_seq_overhead_s"] * batch
        out[f"decode-b{batch}"] = {"decode_tok_s": 1 / step, "output_tok_s": batch / step}
    return out


def test_recovers_every_constant_the_figures_see():
    result = fit(targets(figures(TRUE)), figures, START)
    for name in NAMES:
        assert result.constants[name] == pytest.approx(TRUE[name], rel=0.02), name
    assert result.report.converged and result.report.rms_residual < 0.01
    assert all(abs(r.error) < 0.01 for r in result.residuals)


def test_a_constant_no_figure_sees_stays_where_it_started_with_a_wide_interval():
    def blind(c: Constants) -> dict[str, dict[str, float]]:
        return figures(c, see_request=False)

    result = fit(targets(blind(TRUE)), blind, START)
    described = {c.name: c for c in result.described(references={})}
    seen, unseen = described["compute_flop_s"], described["request_overhead_s"]
    assert unseen.value == pytest.approx(START["request_overhead_s"], rel=1e-6)
    assert unseen.high / unseen.low > 50  # a factor 10 either way at one sd of the prior
    assert seen.high / seen.low < 1.1


def test_one_figure_the_model_cannot_explain_drags_the_others_far_less_than_least_squares(monkeypatch):
    measured = figures(TRUE)
    measured["decode-b8"]["decode_tok_s"] *= 5  # a stream delivered in one burst: a decode speed no step gives
    result = fit(targets(measured), figures, START)
    monkeypatch.setattr("cardgen.calibrated.fit.ROBUST_SCALE", 1e6)  # soft-L1 becomes least squares
    squares = fit(targets(measured), figures, START)

    def others(r):  # how well the figures that are right are reproduced
        return max(abs(x.error) for x in r.residuals if (x.point, x.figure) != ("decode-b8", "decode_tok_s"))

    assert others(result) < 0.05 < 0.10 < others(squares), (others(result), others(squares))
    assert abs(result.constants["bandwidth_byte_s"] / TRUE["bandwidth_byte_s"] - 1) < 0.10
    worst = max(result.residuals, key=lambda r: abs(r.error))
    assert (worst.point, worst.figure) == ("decode-b8", "decode_tok_s") and worst.error < -0.7


def test_the_best_starting_candidate_is_taken():
    far = Constants(tuple(v * 1e-3 if i == 1 else v for i, v in enumerate(START.values)))
    result = fit(targets(figures(TRUE)), figures, START, initial=[far, START])
    assert result.constants["bandwidth_byte_s"] == pytest.approx(TRUE["bandwidth_byte_s"], rel=0.02)


def test_an_ingestion_sweep_weighs_as_two_figures():
    goals = targets(figures(TRUE))
    ingest = [t for t in goals if t.point == "ingest"]
    assert sum(t.weight ** 2 for t in ingest) == pytest.approx(2.0)
    assert all(t.weight == 1.0 for t in goals if t.point != "ingest")
    with pytest.raises(ValueError):
        fit([], figures, START)
    assert isinstance(goals[0], Target) and math.isfinite(goals[0].measured)
