"""``cardgen diff`` output: :func:`format_diff` (text for a person) and :func:`diff_json` (an object for a script).
Both return; the command prints."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import Any

from cardgen.diff.compute import CANNOT_TELL, FigureDiff, RunDiff
from cardgen.diff.resample import LEVEL, MIN_UNITS, RESAMPLES
from cardgen.diff.sample import RunSample
from cardgen.numbers import DASH, figure, ratio, ratio_interval

METHOD = (f"B / A with a {LEVEL * 100:.0f} % percentile bootstrap interval: {RESAMPLES:,} resamples of each run's own "
          "requests (closed-loop steady requests and batch points in whole rounds, open-loop points and the "
          "ingestion sweep by request; a closed point's throughput by Little's law), each run's draws seeded by "
          f"its own data; no interval from fewer than {MIN_UNITS} units. Significant (*) when the interval "
          "excludes 1. KV cache capacity: exact when the server declares it, the saturation probe's bracket as "
          "hard bounds, no interval for the usage extrapolation.")


def run_line(run: RunSample) -> str:
    """``CodeLlama-7b on A100-80GB, vllm 0.6.3, modelled, suite quick, 2026-09-21 14:13 (runs/...)``."""
    s = run.summary
    parts = [f"{s.model} on {s.gpu or 'an unknown GPU'}",
             " ".join(x for x in (s.engine, s.engine_version) if x) or "unknown engine",
             "modelled" if s.modelled else "measured", f"suite {s.suite or '?'}"]
    predicted = sum(1 for x in s.scenarios if x.basis == "predicted")
    if predicted:
        parts.append(f"calibrated: {predicted} of {len(s.scenarios)} points predicted")
    if s.started_at:
        parts.append(s.started_at[:16].replace("T", " "))
    return ", ".join(parts) + (f" ({run.path})" if run.path else "")


def _pct(fraction: float) -> str:
    return f"{100 * fraction:g} %"


def _interval(f: FigureDiff) -> str:
    if f.ci_low is None or f.ci_high is None:
        return DASH
    if f.interval == "exact":
        return "exact"
    text = ratio_interval(f.ci_low, f.ci_high)
    return text + (" (bounds)" if "bounds" in f.interval else "")


def _name(f: FigureDiff) -> str:
    return f"{f.name} ({f.unit})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> list[str]:
    """Plain-text columns: the first left-aligned, the others right-aligned, the last left-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:-1], widths[1:-1], strict=True)]
        out.append(cells[-1])
        return (indent + "  ".join(out)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _verdict(f: FigureDiff) -> str:
    if f.predicted:  # a calibrated run's predicted figure: say so before anything else
        return f"{f.verdict} (predicted in {f.predicted}, not measured)"
    return f"{f.verdict} ({f.note})" if f.verdict == CANNOT_TELL and f.note else f.verdict


def format_diff(d: RunDiff) -> str:
    """The comparison as text: the two runs, the headlines with a verdict each, every shared point's figures."""
    lines = [f"A  {run_line(d.a)}", f"B  {run_line(d.b)}", ""]
    if d.headlines:
        rows = [[_name(h), figure(h.a, h.unit), figure(h.b, h.unit), ratio(h.ratio), _interval(h), _verdict(h)] for h in d.headlines]
        lines += _table(["Headline", "A", "B", "B/A", "95 % interval", "Verdict"], rows)
    else:
        lines.append("No headline figure in both runs.")
    regressions = d.regressions
    lines.append("")
    if regressions:
        lines.append(f"Regression beyond {_pct(d.threshold)}: "
                     + "; ".join(f"{h.name} {h.verdict} (B/A {ratio(h.ratio)})" for h in regressions if h.ratio))
    else:
        lines.append(f"No headline significantly worse by more than {_pct(d.threshold)}.")
    if d.points:
        lines += ["", f"Points both runs measured ({len(d.points)}); * significant:"]
    for p in d.points:
        rows = [[_name(f), figure(f.a, f.unit), figure(f.b, f.unit), ratio(f.ratio), _interval(f),
                 ("*" if f.significant else "") + (f" {f.verdict}" if f.significant else "")
                 + (f"predicted in {f.predicted}" if f.predicted else "")] for f in p.figures]
        lines += ["", p.label + (f" ({p.scenario_a})" if p.scenario_a == p.scenario_b else
                                 f" (A {p.scenario_a}, B {p.scenario_b})")]
        lines += _table(["Figure", "A", "B", "B/A", "95 % interval", ""], rows, indent="  ")
        cause = p.ttft_cause
        if cause is not None and cause.a != cause.b:
            lines.append(f"  TTFT: the part that changed most is {cause.name.removeprefix('TTFT part: ')} "
                         f"({'+' if cause.b >= cause.a else '−'}{figure(abs(cause.b - cause.a), 's')} s)")
    for side, names in (("A", d.only_a), ("B", d.only_b)):
        if names:
            lines += ["", f"Measured only in {side}: {', '.join(names)}"]
    lines += ["", *textwrap.wrap(METHOD, width=110)]
    return "\n".join(lines) + "\n"


def _run_json(run: RunSample) -> dict[str, Any]:
    s = run.summary
    return {"path": run.path, "model": s.model, "gpu": s.gpu, "engine": s.engine, "engine_version": s.engine_version,
            "modelled": s.modelled, "suite": s.suite, "started_at": s.started_at,
            "predicted_points": [x.scenario for x in s.scenarios if x.basis == "predicted"]}


def figure_json(f: FigureDiff) -> dict[str, Any]:
    return {"name": f.key, "label": f.name, "unit": f.unit, "better": f.better, "a": f.a, "b": f.b,
            "ratio": f.ratio, "ci_low": f.ci_low, "ci_high": f.ci_high, "interval": f.interval,
            "significant": f.significant, "verdict": f.verdict, "note": f.note or None,
            "predicted": f.predicted or None}


def diff_json(d: RunDiff) -> dict[str, Any]:
    """The comparison as a JSON-ready object: ``headlines`` (name, a, b, ratio, ci_low, ci_high, verdict ...),
    ``points`` (each with its ``figures``), ``regressions`` (the names of the headlines beyond the threshold)."""
    return {
        "a": _run_json(d.a), "b": _run_json(d.b), "threshold": d.threshold, "level": LEVEL, "method": METHOD,
        "headlines": [figure_json(h) for h in d.headlines],
        "regressions": [h.key for h in d.regressions],
        "points": [{"point": p.label, "scenario_a": p.scenario_a, "scenario_b": p.scenario_b,
                    "figures": [figure_json(f) for f in p.figures]} for p in d.points],
        "only_in_a": d.only_a, "only_in_b": d.only_b,
    }


def format_json(d: RunDiff) -> str:
    return json.dumps(diff_json(d), indent=2) + "\n"
