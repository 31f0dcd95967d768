"""A calibrated run in five steps (the package's docstring says why each is there):

1. identify: measure the points that identify the server (:mod:`cardgen.calibrated.identify`), read its
   scheduler settings (:mod:`cardgen.calibrated.settings`);
2. fit the virtual server's free constants to them (:mod:`cardgen.calibrated.fit`);
3. predict every point of the suite with the fitted server, with intervals (:mod:`cardgen.calibrated.predict`),
   before any check is measured;
4. check: measure the spot checks (:mod:`cardgen.calibrated.check`); a pair whose check misses is measured point
   by point;
5. report: run.json's ``calibration``, and the predicted run as ``predicted.jsonl`` / ``predicted_metrics.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cardgen.analysis.analyse import Analysis, analyse
from cardgen.analysis.rundata import load_run
from cardgen.calibrated import check, identify
from cardgen.calibrated.figures import BURST_GAP_S, as_values, bursty_points, point_figures, worst
from cardgen.calibrated.fit import Fit, Target, fit, targets
from cardgen.calibrated.initial import initial_constants
from cardgen.calibrated.measurer import Measurer
from cardgen.calibrated.perf import Constants, FittedPerf
from cardgen.calibrated.predict import Prediction, pair_of, predict
from cardgen.calibrated.replay import replay
from cardgen.calibrated.settings import ServerSettings, read_settings
from cardgen.errors import UsageError
from cardgen.kinds import kind_of
from cardgen.points import Point
from cardgen.rundir import PREDICTED_JSONL, PREDICTED_METRICS_JSONL, RunDir
from cardgen.schemas.calibration import CalibrationReport, PointPrediction, SpotCheck
from cardgen.schemas.run import PointOutcome, RunInfo
from cardgen.sim.roofline import RooflinePerf, build_perf_model
from cardgen.stops import STOP_SKIPPED

DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True, kw_only=True)
class Start:
    """What the fit starts from: the model's architecture (a preset or a config.json), the GPU the user names and
    an engine profile; the tolerance of a spot check."""

    model: str
    model_config: Path | None = None
    gpu: str = "A100-80GB"
    tp: int = 1
    profile: str = "vllm"
    tolerance: float = DEFAULT_TOLERANCE

    def shape(self) -> RooflinePerf:
        """The roofline model of the starting point. A model the virtual server does not know is a UsageError that
        says to give --model-config."""
        if not 0 < self.tolerance < 1:
            raise UsageError(f"--calibrate-tolerance must be between 0 and 1 (0.05 is 5 %), not {self.tolerance:g}")
        try:
            perf = build_perf_model(model=self.model, model_config=self.model_config, gpu=self.gpu, tp=self.tp,
                                    engine=self.profile)
        except UsageError as exc:
            hint = "" if "--model-config" in exc.message else " (give --model-config with its config.json)"
            raise UsageError(f"--calibrate needs the model's architecture: {exc.message}{hint}") from None
        assert isinstance(perf, RooflinePerf)
        return perf

    @property
    def label(self) -> str:
        return f"the {self.profile} profile on {self.tp}x {self.gpu}"


def _analysed(run_dir: Path) -> Analysis:
    return analyse(load_run(run_dir, stream_requests=True))


def _measured(analysis: Analysis) -> dict[str, dict[str, float]]:
    return point_figures(analysis.requests, analysis.timeseries)


def _saturated(info: RunInfo, name: str) -> bool | None:
    outcome = next((p for p in info.points if p.name == name), None)
    return None if outcome is None or not kind_of(outcome).watch_saturation else bool(outcome.saturation)


STREAMING = ("ttft_s", "decode_tok_s")  # what a stream delivered in bursts times: the server's streaming


def fit_targets(analysis: Analysis, names: Sequence[str]) -> tuple[list[Target], list[str]]:
    """The measured figures of ``names`` the fit reproduces, and those it leaves out with why: the TTFT and
    decode speed of a point whose text arrived in bursts (they time the server's streaming, which the virtual
    server does not model, not its steps), and the throughput of a point during which the load generator fell
    behind (it then measures the client: its users sent late)."""
    measured = _measured(analysis)
    bursty = bursty_points(analysis.requests)
    behind = {s.scenario for s in analysis.summary.scenarios if s.client_kept_up is False}
    kept: dict[str, dict[str, float]] = {}
    left_out: list[str] = []
    for n in names:
        if n not in measured:
            continue
        drop = (set(STREAMING) if n in bursty else set()) | ({"output_tok_s"} if n in behind else set())
        kept[n] = {f: v for f, v in measured[n].items() if f not in drop}
        if n in bursty:
            left_out.append(f"{n}: TTFT and decode speed, {bursty[n]:.0%} of its text chunks arrived within "
                            f"{BURST_GAP_S * 1e3:.1f} ms of the one before (the server streamed in bursts)")
        if n in behind:
            left_out.append(f"{n}: output throughput, the load generator fell behind (its users sent late)")
    return targets(kept), left_out


def write_prediction(run_dir: Path, prediction: Prediction) -> None:
    """``predicted.jsonl`` and ``predicted_metrics.jsonl``, in the shapes of ``requests.jsonl`` and
    ``server_metrics.jsonl``."""
    files = RunDir(run_dir)
    files.write_text(PREDICTED_JSONL, "".join(r.model_dump_json() + "\n" for r in prediction.records))
    files.write_text(PREDICTED_METRICS_JSONL, "".join(
        json.dumps(s.model_dump(mode="json", exclude_none=True), separators=(",", ":")) + "\n"
        for s in prediction.scrapes))


def _predictions(points: Sequence[Point], prediction: Prediction, measured: set[str],
                 checks: Sequence[SpotCheck]) -> list[PointPrediction]:
    """Every point left predicted, with the spot check of its pair and that check's errors (of two checks of a
    pair, the one that missed most)."""
    by_pair: dict[str, SpotCheck] = {}
    for c in checks:  # a pair with two checks is vouched for by the one that missed most
        held = by_pair.get(c.pair)
        if held is None or (worst(c.errors) or 0.0) > (worst(held.errors) or 0.0):
            by_pair[c.pair] = c
    out = []
    for p in points:
        if p.name in measured or p.name not in prediction.points:
            continue
        checked = by_pair.get(pair_of(p) or "")
        out.append(prediction.points[p.name].model_copy(update={
            "check": checked.point if checked else None, "check_errors": checked.errors if checked else None}))
    return out


def calibrate(measurer: Measurer, start: Start, *, say: Callable[[str], None] = lambda line: None) -> RunInfo:
    """The five steps against ``measurer``'s server; returns the final run.json (see the module docstring)."""
    shape = start.shape()
    points = list(measurer.points)
    settings = read_settings(measurer.server, measurer.metrics(), start=shape, start_label=start.label)
    assumed_kv = settings.sources["kv_capacity_tokens"].startswith("assumed")
    chosen = identify.choose(points, kv_declared=not assumed_kv, max_model_len=settings.max_model_len)
    say(f"calibrate 1/5 identify: measuring {len(chosen)} points ({', '.join(c.point.name for c in chosen)})")
    measurer.measure([c.point for c in chosen], phase="identify")
    analysis = _analysed(measurer.run_dir)
    settings = read_settings(measurer.server, load_run(measurer.run_dir).metrics, start=shape, start_label=start.label)
    measured = _measured(analysis)
    identify_names = [c.point.name for c in chosen]
    goals, left_out = fit_targets(analysis, identify_names)

    sent = {p.name: p.requests for p in analysis.info.points}  # each measured point replayed as it ran

    def evaluate(constants: Constants) -> dict[str, dict[str, float]]:
        return replay([c.point for c in chosen], FittedPerf(shape, constants, settings), settings,
                      requests=sent).figures

    say(f"calibrate 2/5 fit: {len(goals)} figures of the measured points, in virtual time")
    begin = Constants.of_profile(shape)
    fitted = fit(goals, evaluate, begin, initial=initial_constants(shape, begin, settings, [c.point for c in chosen],
                                                                  measured))
    fitted = replace(fitted, report=fitted.report.model_copy(update={"left_out": left_out}))
    say(f"calibrate 2/5 fit: {fitted.report.iterations} iterations, {fitted.report.evaluations} virtual runs, "
        f"{fitted.report.seconds:.1f} s; residuals {fitted.report.rms_residual or 0:.1%} rms")
    prediction = predict(points, shape, fitted, settings, served_model=measurer.server.served_model or start.model)
    say(f"calibrate 3/5 predict: {len(prediction.points)} points with intervals in {prediction.seconds:.1f} s")
    done = {p.name for p in analysis.info.points}
    checks = check.choose(points, prediction, done)
    say(f"calibrate 4/5 check: measuring {len(checks)} spot checks ({', '.join(c.point.name for c in checks)})")
    if checks:
        measurer.measure([c.point for c in checks], phase="spot checks")
    analysis = _analysed(measurer.run_dir)
    measured = _measured(analysis)
    spot = [check.judge(c, prediction.points[c.point.name].value, as_values(measured.get(c.point.name, {})),
                        tolerance=start.tolerance, saturated_predicted=bool(prediction.points[c.point.name].saturation)
                        if kind_of(c.point).watch_saturation else None, saturated_measured=_saturated(analysis.info, c.point.name))
            for c in checks]
    missed = [s.pair for s in spot if not s.passed]
    done = {p.name for p in analysis.info.points}
    if missed:
        saturated = [p for p in points if _saturated(analysis.info, p.name)]
        again: list[Point] = []
        skipped_pairs: list[PointOutcome] = []
        for pair in dict.fromkeys(missed):
            run, skipped = check.pair_points(points, pair, done, saturated)
            again += run
            skipped_pairs += [PointOutcome(name=p.name, kind=p.kind, stop=STOP_SKIPPED, detail=why) for p, why in skipped]
        say(f"calibrate 4/5 check: {len(missed)} spot check(s) missed by more than {start.tolerance:.0%}: measuring "
            f"{len(again)} points of {', '.join(dict.fromkeys(missed))} instead")
        if again:
            measurer.measure(again, phase="pairs measured instead")
        if skipped_pairs:
            measurer.not_run(skipped_pairs)
        done = {p.name for p in _analysed(measurer.run_dir).info.points}
    write_prediction(measurer.run_dir, prediction)
    report = _report(start, shape, settings, fitted, chosen, spot, missed, points, prediction, done)
    info = measurer.finish(report)
    say(f"calibrate 5/5 report: {len(done)} points measured, {len(report.predictions)} predicted")
    return info


def _report(start: Start, shape: RooflinePerf, settings: ServerSettings, fitted: Fit, chosen: Sequence[identify.Chosen],
            spot: Sequence[SpotCheck], missed: Sequence[str], points: Sequence[Point], prediction: Prediction,
            done: set[str]) -> CalibrationReport:
    references = {"compute_flop_s": shape.gpu.peak_flops, "bandwidth_byte_s": shape.gpu.bandwidth_bytes_s}  # per GPU
    starts = [o.started_unix for o in prediction.outcomes.values() if o.started_unix is not None]
    ends = [o.ended_unix for o in prediction.outcomes.values() if o.ended_unix is not None]
    return CalibrationReport(
        tolerance=start.tolerance, start_profile=start.profile, start_gpu=shape.gpu.name,
        settings=settings.described(), constants=fitted.described(references=references),
        residuals=fitted.residuals, fit=fitted.report, identify=[c.described() for c in chosen],
        spot_checks=list(spot), remeasured_pairs=list(dict.fromkeys(missed)),
        predictions=_predictions(points, prediction, done, spot), order=[p.name for p in points],
        predict_seconds=prediction.seconds,
        full_plan_gpu_time_s=round((max(ends) - min(starts)) * start.tp, 1) if starts and ends else None)


