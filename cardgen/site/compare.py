"""Comparing the runs of one model on the site: scale tables (each run ÷ a baseline, as FlexGen's), every ratio with
its significance as ``cardgen diff`` computes it, and the curves of every run overlaid (pure).

A run is compared through :class:`~cardgen.diff.RunSample`: the figures of its ``summary.json`` with the
bootstrap digests of its ``bootstrap.json`` (:func:`cardgen.diff.saved_sample`), so the site reads no request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cardgen import numbers
from cardgen.diff import FigureDiff, RunSample, figure_diff
from cardgen.diff.sample import HEADLINES, Figure, PointKey, point_label, point_sort_value
from cardgen.figures.data import InteractivityCurve, pair_name, throughput_interactivity
from cardgen.kinds import kind_of
from cardgen.schemas import Summary
from cardgen.site import charts

SCENARIO_METRICS = (  # (diff figure key, table title)
    ("output_tok_s", "Total output throughput (tok/s)"),
    ("speed_from_start_tok_s/p50", "Speed from start per request, median (tok/s)"),
    ("decode_tok_s/p50", "Decode speed per request, median (tok/s)"),
    ("ttft_s/p50", "Time to first token, median (s)"),
)


@dataclass(frozen=True)
class Cell:
    """One run's figure in a scale table, and against the baseline (None for the baseline or a missing one)."""

    value: float | None
    diff: FigureDiff | None = None
    unit: str = ""  # how the value is written (cardgen.numbers.figure)


@dataclass(frozen=True)
class ScaleTable:
    """Rows of figures, one cell per run; a cell's ``diff`` is the run against the baseline (column 0)."""

    title: str
    rows: list[str]
    cells: list[list[Cell]]  # [row][run]


def _row(figures: Sequence[Figure | None]) -> list[Cell] | None:
    """A row when at least two runs have the figure."""
    if sum(f is not None for f in figures) < 2:
        return None
    base = figures[0]
    return [Cell(None if f is None else f.value, figure_diff(base, f) if i and base is not None and f is not None
                 else None, "" if f is None else f.unit) for i, f in enumerate(figures)]


def headline_table(samples: Sequence[RunSample]) -> ScaleTable:
    rows, cells = [], []
    for key, label, unit, _ in HEADLINES:
        row = _row([s.headlines.get(key) for s in samples])
        if row is not None:
            rows.append(f"{label} ({unit})")
            cells.append(row)
    return ScaleTable("Headline figures", rows, cells)


def scenario_tables(samples: Sequence[RunSample]) -> list[ScaleTable]:
    """One table per figure of :data:`SCENARIO_METRICS`, over the points at least two runs measured."""
    # serving points (cardgen.kinds.Kind.serving_load); the others feed the headline
    keys: set[PointKey] = {k for s in samples for k in s.points if kind_of(dict(k).get("kind")).serving_load}
    tables = []
    for metric, title in SCENARIO_METRICS:
        rows, cells = [], []
        for key in sorted(keys, key=point_sort_value):
            row = _row([s.points[key].figures.get(metric) if key in s.points else None for s in samples])
            if row is not None:
                rows.append(point_label(key))
                cells.append(row)
        if rows:
            tables.append(ScaleTable(title, rows, cells))
    return tables


# --- curves ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCurves:
    label: str
    href: str  # the run's page, relative to the page that shows the chart
    modelled: bool
    curves: list[InteractivityCurve]


def run_curves(summary: Summary, *, label: str, href: str) -> RunCurves:
    return RunCurves(label, href, summary.modelled, throughput_interactivity(summary.scenarios, gpus=summary.gpu_count))


def _pairs(runs: Sequence[RunCurves]) -> list[tuple[int, int]]:
    """The pairs any run measured, the reference pair (1024 → 128) first."""
    pairs = {c.pair for r in runs for c in r.curves}
    return sorted(pairs, key=lambda p: (p != (1024, 128), p))


def interactivity_charts(runs: Sequence[RunCurves]) -> list[charts.Chart]:
    """Per (prompt, output) pair, two charts with a line per run: output tokens/s per GPU against tokens/s per
    user, and against TTFT; a point per parallel count, the run's Pareto front circled, modelled runs dashed."""
    out = []
    for pair in _pairs(runs):
        for ttft in (False, True):
            series = []
            for i, run in enumerate(runs):
                curve = next((c for c in run.curves if c.pair == pair), None)
                if curve is None:
                    continue
                x = curve.ttft_s if ttft else curve.tok_s_per_user
                front = curve.front_ttft if ttft else curve.front_user
                points = [charts.Point(
                    float(x[j]), float(curve.tok_s_per_gpu[j]), label=numbers.integer(curve.parallel[j]),
                    strong=bool(front[j]), href=run.href,
                    hollow=bool(curve.predicted[j]) if len(curve.predicted) else False,
                    title=f"{run.label}: {numbers.integer(curve.parallel[j])} parallel, "
                    f"{numbers.tok_s(curve.tok_s_per_gpu[j])} per GPU, "
                    + (f"TTFT {numbers.ms(x[j])}" if ttft else f"{numbers.tok_s(x[j])} per user")
                    + (" (predicted)" if len(curve.predicted) and curve.predicted[j] else ""))
                    for j in range(len(x))]
                series.append(charts.Series(run.label, points, charts.color(i), hollow=run.modelled))
            what = "TTFT" if ttft else "interactivity"
            predicted = any(len(c.predicted) and c.predicted.any() for r in runs for c in r.curves if c.pair == pair)
            out.append(charts.Chart(
                title=f"Throughput against {what}, {pair_name(pair)}",
                xlabel="median TTFT (s)" if ttft else "tokens/s per user (median decode speed)",
                ylabel="output tokens/s per GPU", series=series,
                notes=["Hollow markers: points a calibrated run predicted (its fitted server), not measured."]
                if predicted else []))
    return out
