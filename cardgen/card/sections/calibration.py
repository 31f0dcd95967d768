"""A calibrated card's account of itself (run.json ``calibration``, :mod:`cardgen.calibrated`): which points were
measured and why, the fitted constants with their intervals, the server's own settings, the spot checks with
their errors, and every predicted point's figures with their intervals and the error of the check that vouches
for them."""

from __future__ import annotations

import statistics
from typing import TypedDict

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.calibration import FIGURES, FigureValues, FittedConstant, PointPrediction, Residual
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import Summary


class CalibrationView(TypedDict):
    measured: int
    predicted: int
    tolerance: str
    checks_passed: int
    checks: int
    remeasured: list[str]
    start: str
    gpu_time: str | None  # the run's load, as GPU time
    full_plan: str | None  # measuring every point, as the fitted server plans it
    fit: str  # how the fit went, in words
    left_out: list[str]
    identify: TableView
    constants: TableView
    settings: TableView
    spot_checks: TableView | None
    check_error: TableView | None  # the spot checks' errors, median and largest per figure
    predictions: TableView | None
    check_summary: str | None  # the spot checks' median / largest |error| per figure, in words (the Method section)
    residuals: TableView | None  # the fit's residual on every measured figure it reproduced


def _rate(c: FittedConstant, value: float | None) -> str:
    if value is None:
        return fmt.DASH
    if c.unit == "FLOP/s":
        return f"{fmt.sig(value / 1e12)} TFLOP/s"
    if c.unit == "B/s":
        return f"{fmt.sig(value / 1e9)} GB/s"
    return fmt.ms(value) if c.unit == "s" else fmt.sig(value)


def _constants(constants: list[FittedConstant]) -> TableView:
    rows = [[c.label, _rate(c, c.start), _rate(c, c.value), f"{_rate(c, c.low)} – {_rate(c, c.high)}",
             fmt.pct(c.value / c.reference) if c.reference else fmt.DASH] for c in constants]
    return TableView(["Constant", "Start", "Fitted", "95 % interval", "Of the named GPU's peak"], rows)


def _errors(e: FigureValues | None) -> list[str]:
    return [fmt.signed_pct(100 * v) if v is not None else fmt.DASH for _, v in (e.named() if e else
                                                                             FigureValues().named())]


def _figure(name: str, value: float | None) -> str:
    return fmt.ms(value) if name == "ttft_s" else fmt.sig(value)


def _predicted_cell(p: PointPrediction, name: str) -> str:
    value, low, high = getattr(p.value, name), getattr(p.low, name), getattr(p.high, name)
    if value is None:
        return fmt.DASH
    if low is None or high is None:
        return _figure(name, value)
    if name == "ttft_s":
        return f"{fmt.ms(value)} ({fmt.interval(low, high, 1000.0)})"
    return f"{fmt.sig(value)} ({fmt.interval(low, high)})"


_LABELS = [label for _, label, _ in FIGURES]
_LABEL = {name: label for name, label, _ in FIGURES}


def _residuals(residuals: list[Residual]) -> TableView | None:
    rows = []
    for r in residuals:
        name, _, length = r.figure.partition("@")
        label = f"TTFT at {length} prompt tokens" if length else _LABEL.get(name, name)
        measured, fitted = (_figure("ttft_s" if length else name, v) for v in (r.measured, r.fitted))
        rows.append([r.point, label, measured, fitted, fmt.signed_pct(100 * r.error)])
    return TableView(["Measured point", "Figure", "Measured", "Fitted server", "Residual"], rows,
                     ["l", "l", "r", "r", "r"]) if rows else None


def calibration_view(s: Summary, info: RunInfo) -> CalibrationView | None:
    """The card's calibration section; None for a run that was not calibrated."""
    cal = s.calibration
    if cal is None:
        return None
    predicted = [x for x in s.scenarios if x.basis == "predicted"]
    checks = TableView(["Spot check", "Pair", "Why", *[f"{label} error" for label in _LABELS], "Passed"],
                       [[c.point, c.pair, c.why, *_errors(c.errors), "yes" if c.passed else f"no: {c.note}"]
                        for c in cal.spot_checks],
                       ["l", "l", "l", "r", "r", "r", "r", "l"]) if cal.spot_checks else None
    error_rows = []
    for name, label, _ in FIGURES:
        values = [abs(v) for c in cal.spot_checks if (v := getattr(c.errors, name)) is not None]
        if values:
            error_rows.append([label, str(len(values)), fmt.pct(statistics.median(values)), fmt.pct(max(values))])
    summary = "; ".join(f"{r[0]} {r[2]} at the median, {r[3]} at worst" for r in error_rows)
    by_name = {p.point: p for p in cal.predictions}
    pred_rows = []
    for x in predicted:
        p = by_name.get(x.scenario)
        if p is None:
            continue
        ran = x.requests > 0
        pred_rows.append([x.scenario, *([_predicted_cell(p, n) for n, _, _ in FIGURES] if ran else
                                        [x.stop_detail or "not run"] + [fmt.DASH] * 3),
                          p.check or fmt.DASH, " / ".join(_errors(p.check_errors)) if p.check_errors else fmt.DASH])
    settings = TableView(["Setting", "Value", "Where it was read"],
                         [[x.name, str(x.value), x.source] for x in cal.settings], ["l", "r", "l"])
    f = cal.fit
    fit = (f"{f.figures} measured figures, {f.iterations} iterations, {f.evaluations} virtual runs of the measured "
           f"points in {fmt.secs(f.seconds)}; residuals {fmt.pct(f.median_residual)} at the median, "
           f"{fmt.pct(f.rms_residual)} root mean square (log)")
    points = [p for p in info.points if p.ended_unix is not None]
    return CalibrationView(
        measured=len([x for x in s.scenarios if x.basis == "measured" and x.requests > 0]), predicted=len(predicted),
        tolerance=f"{fmt.sig(100 * cal.tolerance, 2)} %", checks_passed=sum(c.passed for c in cal.spot_checks),
        checks=len(cal.spot_checks), remeasured=list(cal.remeasured_pairs),
        start=f"the {cal.start_profile} profile on {cal.start_gpu}",
        gpu_time=fmt.duration_text((max(p.ended_unix or 0 for p in points) - min(p.started_unix or 0 for p in points))
                                   * (s.gpu_count or 1)) if points else None,
        full_plan=fmt.duration_text(cal.full_plan_gpu_time_s) if cal.full_plan_gpu_time_s else None,
        fit=fit, left_out=list(f.left_out),
        identify=TableView(["Measured to identify the server", "What it tells the fit"],
                           [[i.name + ("" if i.in_suite else " (not in the suite)"), i.why] for i in cal.identify],
                           ["l", "l"]),
        constants=_constants(cal.constants), settings=settings, spot_checks=checks,
        check_error=TableView(["Figure", "Spot checks", "Median |error|", "Largest |error|"], error_rows)
        if error_rows else None,
        predictions=TableView(["Predicted point", *[f"{label} (95 % interval)" for label in _LABELS], "Spot check",
                               "Its errors (speed / decode / TTFT / throughput)"], pred_rows,
                              ["l", "r", "r", "r", "r", "l", "l"]) if pred_rows else None,
        check_summary=f"over its {len(cal.spot_checks)} spot checks, {summary}" if error_rows else None,
        residuals=_residuals(cal.residuals),
    )
