"""One run as ``cardgen diff`` compares it: every figure it has, each with how its spread is known (pure).

A figure's value is the analysis' own (``summary.json``); its spread comes from the same requests the analysis
took the figure from, as a bootstrap digest (:mod:`cardgen.diff.resample`):

- a closed-loop point's medians and percentiles: its steady requests (all of its successful ones when it was too
  short for a steady state, as the analysis does), resampled in whole rounds; its total output throughput by
  Little's law (N users: throughput = N × tokens / mean E2E), so its replicates scale with Σ output tokens / Σ E2E
  over the resampled rounds;
- an open-loop point's percentiles: its requests; a batch-table point's: its rounds. Their throughput follows the
  arrival rate or the batch, not a sample of requests: no interval;
- prompt ingestion: the sweep's requests, the robust line refitted (trimming included) on each resample;
- KV cache capacity: one number, not a sample. A capacity the server declares is exact (a ratio with no spread);
  a probe's is bracketed (the ratio's bounds follow from both brackets: hard bounds,
  not a statistical interval); the usage extrapolation has no interval.

:func:`bootstrap_digests` draws the digests from an analysed run (its requests); :func:`run_sample` puts them
with the summary's figures, so a run can be compared from its ``summary.json`` and saved digests alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from cardgen.analysis.analyse import HEADLINE_POINT, Analysis
from cardgen.diff import resample
from cardgen.diff.kindparts import HIGHER, LOWER, KindFigure, kind_diff
from cardgen.kinds import KINDS, kind_of
from cardgen.schemas.summary import ScenarioSummary, Summary, TimeBudget
from cardgen.stops import STOP_SKIPPED

# (ScenarioSummary distribution field, label, unit, better)
METRICS = (
    ("speed_from_start_tok_s", "speed from start", "tok/s", HIGHER),
    ("decode_tok_s", "decode speed", "tok/s", HIGHER),
    ("ttft_s", "TTFT", "s", LOWER),
    ("tpot_s", "TPOT", "s", LOWER),
    ("e2e_s", "E2E latency", "s", LOWER),
)
# a reasoning model's points only (a point whose requests reasoned): time to the answer's first token
REASONING_METRICS = (("ttfa_s", "time to first answer token", "s", LOWER),)
STATS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
# the server's own counters over a point (speculative decoding): one number, no request-level spread
ACCEPTANCE = ("acceptance_rate", "speculative acceptance rate", "fraction", HIGHER)
THROUGHPUT = ("output_tok_s", "total output throughput", "tok/s", HIGHER)

# where a point's mean TTFT went (summary.json time_budget): the parts, which way is better (lower), their labels
PART_KEY = "ttft_part/{}"
PART_LABELS = {"queue": "TTFT part: queue", "prompt": "TTFT part: prompt compute",
               "other_server": "TTFT part: other server time", "network_client": "TTFT part: network and client",
               "outside_engine": "TTFT part: outside the engine's account"}
PER_REQUEST_PARTS = ("queue", "prompt", "outside_engine")  # the parts each request's own account gives

_AT = (f"{HEADLINE_POINT['parallel']} parallel, {HEADLINE_POINT['prompt_tokens']} → "
       f"{HEADLINE_POINT['output_tokens']}")
INGESTION, KV = "prompt_ingestion_tok_s", "kv_cache_tokens"
# (key, label, unit, better): the headline figures
HEADLINES = (
    (INGESTION, "Prompt ingestion", "tok/s", HIGHER),
    ("generation_tok_s_at_10_parallel_1024_128", f"Speed from start per request, {_AT}", "tok/s", HIGHER),
    ("decode_tok_s_at_10_parallel_1024_128", f"Decode speed per request, {_AT}", "tok/s", HIGHER),
    ("ttft_s_at_10_parallel_1024_128", f"TTFT p50, {_AT}", "s", LOWER),
    (KV, "KV cache capacity", "tokens", HIGHER),
    ("ttfa_s_at_10_parallel_1024_128", f"Time to first answer token p50, {_AT}", "s", LOWER),
    (ACCEPTANCE[0], "Speculative acceptance rate, the run", "fraction", HIGHER),
)
HEADLINE_FIGURES = {  # the headlines that are a figure of the headline point (its metric/stat)
    "generation_tok_s_at_10_parallel_1024_128": "speed_from_start_tok_s/p50",
    "decode_tok_s_at_10_parallel_1024_128": "decode_tok_s/p50",
    "ttft_s_at_10_parallel_1024_128": "ttft_s/p50",
    "ttfa_s_at_10_parallel_1024_128": "ttfa_s/p50",
}

# how a figure's spread is known
BOOTSTRAP, EXACT, BOUNDS, NONE = "bootstrap", "exact", "bounds", "none"
NOT_DRAWN = "no bootstrap digests for this run (render it again with this cardgen)"


@dataclass(frozen=True)
class Spread:
    """How well a figure is known: a bootstrap ``digest`` (:func:`cardgen.diff.resample.digest`), ``exact``, hard
    ``bounds`` (``low``, ``high``), or ``none``; ``note`` says why there is no interval."""

    method: str
    digest: np.ndarray | None = None
    low: float | None = None
    high: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Figure:
    """One figure of one run: its value and spread, the unit, and which way is better."""

    key: str  # matches the same figure in another run: "ttft_s/p50", a headline's key
    label: str
    unit: str
    better: str  # HIGHER | LOWER
    value: float
    spread: Spread
    predicted: bool = False  # a calibrated run's predicted point: its fitted server's figure, not a measurement


PointKey = tuple[tuple[str, Any], ...]
POINT_PARAMS = ("kind", "prompt_tokens", "output_tokens", "parallel", "rate_rps", "all_at_once")
_PARAM_LABELS = {"parallel": "{} parallel", "rate_rps": "{} req/s"}


def point_key(entry: Mapping[str, Any]) -> PointKey:
    """A point's identity across runs: the parameters it has among :data:`POINT_PARAMS`, and its name where its
    kind tells its points apart by name (``Kind.diff_by_name``)."""
    key = tuple((p, entry[p]) for p in POINT_PARAMS if entry.get(p) not in (None, False))
    named = kind_of(entry.get("kind")).diff_by_name and entry.get("scenario")
    return (*key, ("scenario", entry["scenario"])) if named else key


def point_label(key: PointKey) -> str:
    """``closed · 1024 → 128 tokens · 10 parallel``."""
    p = dict(key)
    parts = []
    if "prompt_tokens" in p or "output_tokens" in p:
        parts.append(f"{p.get('prompt_tokens', '?')} → {p.get('output_tokens', '?')} tokens")
    parts += [fmt.format(p[name]) for name, fmt in _PARAM_LABELS.items() if name in p]
    if p.get("all_at_once"):
        parts.append("all at once")
    return " · ".join([str(p.get("kind", "scenario"))] + parts)


def point_sort_value(key: PointKey) -> tuple[object, ...]:
    """Points in a stable order: by their kind's ``diff_rank`` (closed, open, batch, then any other kind), each by
    its numbers."""
    rank = kind_of(dict(key).get("kind")).diff_rank
    rank = rank if rank is not None else len(KINDS)
    return (rank, *((name, value if isinstance(value, int | float) else float("inf"), str(value))
                    for name, value in key))


def scenario_key(s: ScenarioSummary) -> PointKey:
    return point_key(s.model_dump(include={*POINT_PARAMS, "scenario"}))


@dataclass(frozen=True)
class PointSample:
    key: PointKey
    scenario: str
    figures: dict[str, Figure]

    @property
    def label(self) -> str:
        return point_label(self.key)


@dataclass(frozen=True)
class RunSample:
    """Every figure of one run that ``cardgen diff`` can compare, and which points its suite has."""

    summary: Summary
    path: str | None
    headlines: dict[str, Figure]
    points: dict[PointKey, PointSample]  # points that were measured
    # every point of its suite by name (cardgen.points names them by their parameters; an outcome, such as
    # the largest group a probe sent, is not in its name), run or not
    suite_points: tuple[str, ...] = ()


# --- which figures a run has ----------------------------------------------------------------------------------


def measured_points(summary: Summary) -> Iterator[ScenarioSummary]:
    """The serving points that sent at least one successful request, first of each identity (those of a kind with
    a ``diff_rank``: the others feed the headline figures)."""
    seen: set[PointKey] = set()
    for s in summary.scenarios:
        key = scenario_key(s)
        if kind_of(s).diff_rank is not None and s.stop != STOP_SKIPPED and s.requests > s.failed and key not in seen:
            seen.add(key)
            yield s


def _unit(s: ScenarioSummary) -> str:
    """What a point's resampling unit is, in words."""
    return kind_diff(s).unit(s)


def figure_id(scenario: str, key: str) -> str:
    """The name of one figure's digest: ``closed-in1024-out128-p10/ttft_s/p50``, ``headline/<key>``."""
    return f"{scenario}/{key}"


# --- drawing the digests (needs the requests) -------------------------------------------------------------------


def _point_requests(analysis: Analysis, s: ScenarioSummary) -> tuple[pd.DataFrame, np.ndarray]:
    """The requests a point's figures come from, in send order, and their resampling units."""
    frame = analysis.requests
    rows = frame[(frame["scenario"] == s.scenario) & ~frame["warmup"] & frame["ok"]]
    return kind_diff(s).requests(rows, s)


def point_metrics(s: ScenarioSummary) -> tuple[tuple[str, str, str, str], ...]:
    """The per-request figures a point has: the time to first answer token too when its requests reasoned."""
    return METRICS + (REASONING_METRICS if s.reasoning_tokens_mean or s.unanswered else ())


def _kind_figures(s: ScenarioSummary, summary: Summary) -> Sequence[KindFigure]:
    """The point's own figures, where its kind names some (``KindDiff.figures``)."""
    own = kind_diff(s).figures
    return own(s, summary.kinds.get(s.kind)) if own is not None else ()


def _point_digests(analysis: Analysis, s: ScenarioSummary) -> dict[str, np.ndarray | None]:
    rows, labels = _point_requests(analysis, s)
    out: dict[str, np.ndarray | None] = {}
    for f in _kind_figures(s, analysis.summary):
        if f.rows is not None:
            mask = np.asarray(f.rows(rows), dtype=bool)
            reps = resample.quantile_replicates(rows[f.metric].to_numpy(dtype=float)[mask], labels[mask], [f.q])
            out[figure_id(s.scenario, f.key)] = resample.digest(None if reps is None else reps[0])
    if not kind_diff(s).pooled:
        return out
    for metric, *_ in point_metrics(s):
        reps = resample.quantile_replicates(rows[metric].to_numpy(dtype=float), labels, [q for _, q in STATS])
        for j, (stat, _) in enumerate(STATS):
            out[figure_id(s.scenario, f"{metric}/{stat}")] = resample.digest(None if reps is None else reps[j])
    if kind_diff(s).throughput(s) is None and s.output_tok_s:
        tokens = rows["output_tokens"].to_numpy(dtype=float)
        e2e = rows["e2e_s"].to_numpy(dtype=float)
        keep = np.isfinite(tokens) & np.isfinite(e2e)
        observed = tokens[keep].sum() / e2e[keep].sum() if keep.any() else 0.0
        reps = resample.ratio_of_sums_replicates(tokens, e2e, labels) if observed > 0 else None
        out[figure_id(s.scenario, THROUGHPUT[0])] = resample.digest(
            None if reps is None else s.output_tok_s * reps / observed)
    return out


def part_values(rows: pd.DataFrame, part: str) -> np.ndarray | None:
    """Each request's seconds in ``part`` of its TTFT, from the engine's own account of it (None when some request
    has none: the part then comes from the server's histograms, one number)."""
    queue = rows["engine_queue_ms"].to_numpy(dtype=float) / 1000
    prompt = rows["engine_prompt_ms"].to_numpy(dtype=float) / 1000
    if part == "queue":
        values = queue
    elif part == "prompt":
        values = prompt
    elif part == "outside_engine":
        values = rows["ttft_s"].to_numpy(dtype=float) - np.nan_to_num(queue) - prompt
    else:
        return None
    return values if len(values) and np.isfinite(values).all() else None


def _part_digests(analysis: Analysis, s: ScenarioSummary) -> dict[str, np.ndarray | None]:
    """The bootstrap digest of the mean of each part of the point's TTFT that its requests' own accounts give, over
    the requests the time budget took it from (every successful one, each a unit)."""
    budget = analysis.summary.time_budget.of(s.scenario)
    if budget is None:
        return {}
    frame = analysis.requests
    rows = frame[(frame["scenario"] == s.scenario) & ~frame["warmup"] & frame["ok"]]
    out: dict[str, np.ndarray | None] = {}
    for part in budget.parts:
        values = part_values(rows, part.part) if part.part in PER_REQUEST_PARTS else None
        if values is not None:
            reps = resample.ratio_of_sums_replicates(values, np.ones(len(values)), np.arange(len(values)))
            out[figure_id(s.scenario, PART_KEY.format(part.part))] = resample.digest(reps)
    return out


def bootstrap_digests(analysis: Analysis) -> dict[str, np.ndarray | None]:
    """Figure id -> the bootstrap digest of every figure of the run that has a request-level spread (None: too
    few units for an interval)."""
    out: dict[str, np.ndarray | None] = {}
    for s in measured_points(analysis.summary):
        out.update(_point_digests(analysis, s))
        if kind_diff(s).pooled:  # the parts of its TTFT are figures over all of its requests
            out.update(_part_digests(analysis, s))
    result = analysis.ingestion
    if analysis.summary.ingestion is not None and analysis.summary.ingestion.tok_s and result is not None:
        out[figure_id("headline", INGESTION)] = resample.digest(
            resample.inverse_slope_replicates(result.prompt_tokens, result.ttft_s))
    return out


# --- the run's figures ------------------------------------------------------------------------------------------


def _bootstrap(digests: Mapping[str, np.ndarray | None] | None, fid: str, few: str) -> Spread:
    if digests is None:
        return Spread(NONE, note=NOT_DRAWN)
    d = digests.get(fid)
    return Spread(BOOTSTRAP, d) if d is not None else Spread(NONE, note=few)


PREDICTED_NOTE = "predicted by a calibrated run's fitted server, not measured: no bootstrap interval"


def _parts(s: ScenarioSummary, budget: TimeBudget | None,
           digests: Mapping[str, np.ndarray | None] | None) -> dict[str, Figure]:
    """Each part of the point's mean TTFT (:mod:`cardgen.analysis.timebudget`) as a figure: a bootstrap interval
    where each request's own account gives it, none where the server's histograms do."""
    out: dict[str, Figure] = {}
    for part in budget.parts if budget is not None else ():
        if part.seconds is None or part.part not in PART_LABELS:
            continue
        key = PART_KEY.format(part.part)
        spread = (_bootstrap(digests, figure_id(s.scenario, key), "too few requests: no interval")
                  if "per-request" in part.source else
                  Spread(NONE, note="from the server's histograms over the point: one number, no interval"))
        out[key] = Figure(key, PART_LABELS[part.part], "s", LOWER, max(part.seconds, 0.0), spread)
    return out


def _point(s: ScenarioSummary, digests: Mapping[str, np.ndarray | None] | None,
           budget: TimeBudget | None = None, own: Sequence[KindFigure] = ()) -> PointSample:
    if s.basis == "predicted":  # no request of the server behind it: its figures are the fitted server's
        fitted = _point(s.model_copy(update={"basis": "measured"}), {}, own=own).figures
        return PointSample(scenario_key(s), s.scenario, {k: replace(f, spread=Spread(NONE, note=PREDICTED_NOTE),
                                                                       predicted=True) for k, f in fitted.items()})
    few = f"fewer than {resample.MIN_UNITS} {_unit(s)}: no interval"
    figures: dict[str, Figure] = {}
    for f in own:
        if math.isfinite(f.value):
            spread = (_bootstrap(digests, figure_id(s.scenario, f.key), few) if f.rows is not None
                      else Spread(NONE, note=f.note))
            figures[f.key] = Figure(f.key, f.label, f.unit, f.better, f.value, spread)
    if not kind_diff(s).pooled:
        return PointSample(scenario_key(s), s.scenario, figures)
    for metric, label, unit, better in point_metrics(s):
        for stat, _ in STATS:
            value = resample.finite_or_none(getattr(getattr(s, metric), stat))
            if value is not None:
                key = f"{metric}/{stat}"
                figures[key] = Figure(key, f"{label} {stat}", unit, better, value,
                                      _bootstrap(digests, figure_id(s.scenario, key), few))
    key, label, unit, better = THROUGHPUT
    value = resample.finite_or_none(s.output_tok_s)
    if value is not None:
        why_not = kind_diff(s).throughput(s)
        spread = (_bootstrap(digests, figure_id(s.scenario, key), few) if why_not is None
                  else Spread(NONE, note=why_not))
        figures[key] = Figure(key, label, unit, better, value, spread)
    key, label, unit, better = ACCEPTANCE
    value = resample.finite_or_none(s.speculative.acceptance_rate) if s.speculative is not None else None
    if value is not None:
        figures[key] = Figure(key, label, unit, better, value,
                              Spread(NONE, note="the server's counters over the point: one number, no interval"))
    figures.update(_parts(s, budget, digests))
    return PointSample(scenario_key(s), s.scenario, figures)


def _kv(summary: Summary) -> Spread:
    kv = summary.kv_cache
    chosen = next((e for e in kv.estimates if e.method == kv.method), None)
    if kv.method == "server_config":
        return Spread(EXACT, note="declared by the server: exact")
    if kv.method == "saturation_probe" and chosen is not None and chosen.low is not None and chosen.high is not None:
        return Spread(BOUNDS, low=chosen.low, high=chosen.high,
                      note="the saturation probe's bracket: hard bounds, not a statistical interval")
    return Spread(NONE, note=f"{kv.method}: one number with no request-level spread, no interval")


def run_sample(summary: Summary, digests: Mapping[str, np.ndarray | None] | None, *,
               path: str | None = None) -> RunSample:
    """The run's comparable figures: values from ``summary``, spreads from ``digests`` (:func:`bootstrap_digests`,
    or as saved; None when the run has none: its figures then have no interval)."""
    points = {scenario_key(s): _point(s, digests, summary.time_budget.of(s.scenario), _kind_figures(s, summary))
              for s in measured_points(summary)}
    suite_points = tuple(dict.fromkeys(s.scenario for s in summary.scenarios))
    labels = {key: (label, unit, better) for key, label, unit, better in HEADLINES}
    headlines: dict[str, Figure] = {}
    if summary.ingestion is not None and summary.ingestion.tok_s:
        headlines[INGESTION] = Figure(INGESTION, *labels[INGESTION], summary.ingestion.tok_s,
                                      _bootstrap(digests, figure_id("headline", INGESTION),
                                                 f"fewer than {resample.MIN_UNITS} sweep requests: no interval"))
    g = summary.generation
    point = next((p for p in points.values() if g is not None and p.scenario == g.scenario), None)
    for key, figure_key in HEADLINE_FIGURES.items():
        figure = point.figures.get(figure_key) if point is not None else None
        if figure is not None:
            headlines[key] = Figure(key, *labels[key], figure.value, figure.spread)
    if summary.kv_cache.tokens is not None:
        headlines[KV] = Figure(KV, *labels[KV], float(summary.kv_cache.tokens), _kv(summary))
    accepted = summary.speculative.acceptance_rate if summary.speculative is not None else None
    if accepted is not None:
        headlines[ACCEPTANCE[0]] = Figure(ACCEPTANCE[0], *labels[ACCEPTANCE[0]], accepted,
                                          Spread(NONE, note="the server's counters over the run: no interval"))
    return RunSample(summary=summary, path=path, headlines=headlines, points=points, suite_points=suite_points)
