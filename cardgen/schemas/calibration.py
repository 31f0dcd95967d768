"""A calibrated run's account of itself (run.json ``calibration``), and what summary.json says of each predicted
point (``ScenarioSummary.prediction``).

A calibrated run (``cardgen build --calibrate``) measures the points that identify the server, fits the virtual
server's free constants to them, predicts every other point of the suite with the fitted server, and measures
spot checks of the prediction (:mod:`cardgen.calibrated`). ``calibration`` records all of it: the server's own
settings and where each was read, the constants with their 95 % intervals and the residuals on the measured
points, why each measured point was chosen, the spot checks with their errors, the pairs measured instead after a
spot check missed, and the predicted points with the interval of each figure. The predicted requests are in
``predicted.jsonl`` (and the fitted server's own ``/metrics`` in ``predicted_metrics.jsonl``), in the shape of
``requests.jsonl``, on a virtual clock of their own.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cardgen.schemas.saved import Saved

MEASURED, PREDICTED = "measured", "predicted"  # a scenario's basis (summary.json ``scenarios[].basis``)

# the per-point figures a calibration predicts and checks: (field of FigureValues, label, unit)
FIGURES = (
    ("speed_from_start_tok_s", "speed from start p50", "tok/s"),
    ("decode_tok_s", "decode p50", "tok/s"),
    ("ttft_s", "TTFT p50", "s"),
    ("output_tok_s", "output throughput", "tok/s"),
)


class FigureValues(Saved):
    """The figures of one point a calibration predicts and checks: medians of speed from start, decode speed and
    TTFT, and the total output throughput (None where the point has none). The same fields hold values, bounds
    or relative errors (predicted / measured - 1), as their owner says."""

    speed_from_start_tok_s: float | None = None
    decode_tok_s: float | None = None
    ttft_s: float | None = None
    output_tok_s: float | None = None

    def named(self) -> list[tuple[str, float | None]]:
        """(field, value) in the order of :data:`FIGURES`."""
        return [(name, getattr(self, name)) for name, _, _ in FIGURES]


class ServerSetting(Saved):
    """One setting of the measured server's scheduler, and where it was read (or why it was assumed)."""

    name: str  # kv_capacity_tokens | block_size | max_num_seqs | max_num_batched_tokens | chunked_prefill | ...
    value: Any
    source: str


class FittedConstant(Saved):
    """One free constant of the virtual server, as the fit began and ended, with its 95 % interval."""

    name: str  # compute_flop_s | bandwidth_byte_s | step_overhead_s | per_seq_overhead_s | ...
    label: str
    unit: str
    start: float  # the starting engine profile's value on the named GPU
    value: float
    low: float | None = None
    high: float | None = None
    reference: float | None = None  # the named GPU's peak (FLOP/s, bytes/s): value / reference is the efficiency


class Residual(Saved):
    """How the fitted server reproduces one figure of a measured point: fitted / measured - 1."""

    point: str
    figure: str  # a FigureValues field, or ``ttft_s@N`` (the ingestion sweep's median TTFT at N prompt tokens)
    measured: float
    fitted: float
    error: float


class IdentifyPoint(Saved):
    """A point measured to identify the server, and what it tells the fit."""

    name: str
    why: str
    in_suite: bool = True  # False: a probe the suite does not have (its records are measured all the same)


class SpotCheck(Saved):
    """A predicted point measured to check the prediction: predicted and measured figures, the relative error of
    each, and whether every error is within the tolerance (and the saturation predicted is the one measured)."""

    point: str
    pair: str  # the prompt / output pair whose points it vouches for, e.g. "1024/128"
    why: str
    predicted: FigureValues
    measured: FigureValues
    errors: FigureValues
    passed: bool
    saturated_predicted: bool | None = None
    saturated_measured: bool | None = None
    note: str | None = None


class PointPrediction(Saved):
    """One predicted point: each figure's value and 95 % interval from the fit's uncertainty, and the spot check
    that vouches for its pair with that check's errors (the measured error of the prediction next to it)."""

    point: str
    pair: str | None = None
    value: FigureValues = Field(default_factory=FigureValues)
    low: FigureValues = Field(default_factory=FigureValues)
    high: FigureValues = Field(default_factory=FigureValues)
    check: str | None = None  # the spot check's point
    check_errors: FigureValues | None = None
    # how the prediction ran the point, in virtual time (run.json ``points`` says the same of a measured one)
    requests: int = 0
    seconds: float | None = None  # how long it ran (what measuring it would take, as the fitted server plans it)
    stop: str | None = None
    detail: str | None = None
    saturation: str | None = None


class FitReport(Saved):
    """How the fit went: its residuals' spread, the virtual evaluations it took and how long."""

    iterations: int = 0
    evaluations: int = 0  # virtual runs of the measured points
    seconds: float = 0.0
    rms_residual: float | None = None  # root mean square of the log residuals (0.03: about 3 %)
    median_residual: float | None = None  # median of their absolute values
    figures: int = 0  # residuals fitted
    converged: bool = False
    left_out: list[str] = Field(default_factory=list)  # measured figures the fit did not use, and why


class CalibrationReport(Saved):
    """run.json ``calibration``: everything a calibrated run decided, and why."""

    method: str = "calibrated"
    tolerance: float = 0.05  # a spot check passes when every figure is within this fraction of the measured one
    start_profile: str  # the engine profile the fit started from
    start_gpu: str  # the GPU whose datasheet gave the starting rates (and the efficiencies' reference)
    settings: list[ServerSetting] = Field(default_factory=list)
    constants: list[FittedConstant] = Field(default_factory=list)
    residuals: list[Residual] = Field(default_factory=list)
    fit: FitReport = Field(default_factory=FitReport)
    identify: list[IdentifyPoint] = Field(default_factory=list)
    spot_checks: list[SpotCheck] = Field(default_factory=list)
    remeasured_pairs: list[str] = Field(default_factory=list)  # pairs measured point by point after a check missed
    predictions: list[PointPrediction] = Field(default_factory=list)  # every point of the suite that was predicted
    order: list[str] = Field(default_factory=list)  # every point of the suite, in suite order
    predict_seconds: float = 0.0  # computing the prediction and its intervals (the server waits for part of it)
    planned_gpu_time_s: float | None = None  # the calibrated plan of this run
    full_plan_gpu_time_s: float | None = None  # the same suite measured point by point, as planned

    def prediction(self, point: str) -> PointPrediction | None:
        return next((p for p in self.predictions if p.point == point), None)
