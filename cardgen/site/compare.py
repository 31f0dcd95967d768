"""Comparing runs of one model: "scale" tables (each run ÷ a baseline, as FlexGen's) and overlaid curves.

Pure: reads :class:`~cardgen.schemas.summary.Summary` objects and draws onto given matplotlib Axes. Scenario
entries are read tolerantly (models or plain dicts): a point is identified by the parameters it has among
:data:`POINT_PARAMS`; distributions (``{"ttft_s": {"p50": ...}}``) are read as ``ttft_s_p50``; what a run
lacks is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from cardgen.schemas import Summary
from cardgen.schemas.run import STOP_SKIPPED

POINT_PARAMS = ("kind", "prompt_tokens", "output_tokens", "parallel", "rate_rps", "all_at_once")
TABLE_KINDS = (
    "closed",
    "open",
)  # scenario tables compare serving points; ingestion and waves feed the headline
CURVE_X = "parallel"
HEADLINE_ROWS = (
    ("prompt_ingestion_tok_s", "Prompt ingestion (tok/s)"),
    (
        "generation_tok_s_at_10_parallel_1024_128",
        "Speed from start per request, 10 parallel, 1024 → 128 (tok/s)",
    ),
    ("decode_tok_s_at_10_parallel_1024_128", "Decode speed per request, 10 parallel, 1024 → 128 (tok/s)"),
    ("kv_cache_tokens", "KV cache capacity (tokens)"),
)
SCENARIO_METRICS = (  # (flattened key, table title, axis label)
    ("output_tok_s", "Total output throughput (tok/s)", "total output (tok/s)"),
    (
        "speed_from_start_tok_s_p50",
        "Speed from start per request, median (tok/s)",
        "speed from start, p50 (tok/s)",
    ),
    ("decode_tok_s_p50", "Decode speed per request, median (tok/s)", "decode speed, p50 (tok/s)"),
    ("ttft_s_p50", "Time to first token, median (s)", "TTFT, p50 (s)"),
)


def flatten(entry: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"ttft_s": {"p50": 1}}`` -> ``{"ttft_s_p50": 1}``; other values unchanged."""
    flat: dict[str, Any] = {}
    for key, value in entry.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}_"))
        else:
            flat[name] = value
    return flat


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def headline_value(summary: Summary, key: str) -> float | None:
    """A headline figure, falling back on the top-level field of the same name."""
    value = getattr(summary.headline, key, None)
    if value is None:
        value = getattr(summary, key, None)
    return _number(value)


PointKey = tuple[tuple[str, Any], ...]


def point_key(entry: dict[str, Any]) -> PointKey:
    return tuple((p, entry[p]) for p in POINT_PARAMS if entry.get(p) not in (None, False))


def scenario_entries(summary: Summary) -> list[dict[str, Any]]:
    """The summary's scenario points that ran, as flat dicts (``ttft_s_p50`` ...), whatever their saved
    form. A point that was not run (skipped after a saturated one) has no figures to compare."""
    out = []
    for entry in summary.scenarios:
        data = entry.model_dump() if isinstance(entry, BaseModel) else entry
        if isinstance(data, dict) and data.get("stop") != STOP_SKIPPED:
            out.append(flatten(data))
    return out


_PARAM_LABELS = {"parallel": "{} parallel", "rate_rps": "{} req/s"}


def point_label(key: PointKey) -> str:
    p = dict(key)
    parts = []
    if "prompt_tokens" in p or "output_tokens" in p:
        parts.append(f"{p.get('prompt_tokens', '?')} → {p.get('output_tokens', '?')} tokens")
    parts += [fmt.format(p[name]) for name, fmt in _PARAM_LABELS.items() if name in p]
    if p.get("all_at_once"):
        parts.append("all at once")
    return " · ".join([str(p.get("kind", "scenario"))] + parts)


def _sort_value(key: PointKey) -> tuple:
    return tuple(
        (name, value if isinstance(value, int | float) else float("inf"), str(value)) for name, value in key
    )


@dataclass(frozen=True)
class ScaleTable:
    """Rows of figures, one column per run; :meth:`scale` is a run's figure ÷ the baseline's (column 0)."""

    title: str
    rows: list[str]
    values: list[list[float | None]]  # [row][run]

    def scale(self, row: int, run: int) -> float | None:
        base, value = self.values[row][0], self.values[row][run]
        if base is None or value is None or base == 0:
            return None
        return value / base


def headline_table(summaries: Sequence[Summary]) -> ScaleTable:
    rows = [(label, [headline_value(s, key) for s in summaries]) for key, label in HEADLINE_ROWS]
    rows = [r for r in rows if any(v is not None for v in r[1])]
    return ScaleTable("Headline figures", [r[0] for r in rows], [r[1] for r in rows])


def scenario_tables(summaries: Sequence[Summary]) -> list[ScaleTable]:
    """One table per figure of :data:`SCENARIO_METRICS`, over the points at least two runs share."""
    per_run = [
        {
            point_key(e): e
            for e in scenario_entries(s)
            if point_key(e) and e.get("kind", "closed") in TABLE_KINDS
        }
        for s in summaries
    ]
    tables = []
    for metric, title, _ in SCENARIO_METRICS:
        keys = {k for points in per_run for k, e in points.items() if _number(e.get(metric)) is not None}
        shared = [
            k
            for k in sorted(keys, key=_sort_value)
            if sum(_number(points.get(k, {}).get(metric)) is not None for points in per_run) >= 2
        ]
        if shared:
            values = [[_number(points.get(k, {}).get(metric)) for points in per_run] for k in shared]
            tables.append(ScaleTable(title, [point_label(k) for k in shared], values))
    return tables


@dataclass(frozen=True)
class Curve:
    run: int  # index into the compared runs
    xs: list[float]
    ys: list[float]


@dataclass(frozen=True)
class CurveSet:
    """Curves of one (prompt, output) pair: per figure of :data:`SCENARIO_METRICS`, one curve per run."""

    prompt_tokens: Any
    output_tokens: Any
    panels: list[tuple[str, list[Curve]]]  # (axis label, curves)


def curve_sets(summaries: Sequence[Summary]) -> list[CurveSet]:
    """Figures against parallel requests for every (prompt, output) pair that at least two runs measured."""
    pairs: dict[tuple[Any, Any], dict[str, list[Curve]]] = {}
    for i, s in enumerate(summaries):
        points: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for e in scenario_entries(s):
            if _number(e.get(CURVE_X)) is not None and e.get("kind", "closed") == "closed":
                points.setdefault((e.get("prompt_tokens"), e.get("output_tokens")), []).append(e)
        for pair, entries in points.items():
            for metric, _, label in SCENARIO_METRICS:
                xy = sorted(
                    (_number(e[CURVE_X]), _number(e.get(metric)))
                    for e in entries
                    if _number(e.get(metric)) is not None
                )
                if len(xy) >= 1:
                    pairs.setdefault(pair, {}).setdefault(label, []).append(
                        Curve(i, [x for x, _ in xy], [y for _, y in xy])
                    )
    out = []
    for (prompt, output), panels in sorted(pairs.items(), key=lambda kv: str(kv[0])):
        kept = [(label, curves) for label, curves in panels.items() if len(curves) >= 2]
        if kept:
            out.append(CurveSet(prompt, output, kept))
    return out


def mpl_text(text: str) -> str:
    """Text safe for a matplotlib label: ``$`` would start mathtext."""
    return text.replace("$", r"\$")


def run_color(run: int) -> str:
    """The same colour for a run in every panel (matplotlib's default cycle)."""
    return f"C{run % 10}"


def draw_curves(ax: Any, label: str, curves: Sequence[Curve], run_labels: Sequence[str]) -> None:
    """One line per run on ``ax``: figure ``label`` against parallel requests (the legend is the figure's)."""
    for curve in curves:
        ax.plot(
            curve.xs,
            curve.ys,
            marker="o",
            linewidth=1.6,
            markersize=4,
            color=run_color(curve.run),
            label=mpl_text(run_labels[curve.run]),
        )
    ax.set_xlabel("parallel requests")
    ax.set_ylabel(mpl_text(label))
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
