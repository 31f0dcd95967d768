"""What the card template sees: a typed context built from an analysis (pure).

Tables arrive as :class:`TableView` of already-formatted cell strings; the template escapes every cell when it
prints it. Only values cardgen itself made (figure paths, the front matter) are marked safe.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd
from markupsafe import Markup

from cardgen.analysis.analyse import HEADLINE_POINT, Analysis
from cardgen.analysis.scenarios import closed_pairs
from cardgen.card import format as fmt
from cardgen.card.escape import front_matter
from cardgen.errors import RenderError
from cardgen.figures.data import throughput_interactivity
from cardgen.figures.names import FIGURE_NAMES, pair_figure_name
from cardgen.gpu import NO_TELEMETRY
from cardgen.redact import MASK, is_secret_flag, is_secret_key, redact_argv
from cardgen.rundir import FIGURES_DIR, slugify
from cardgen.saturation import MAX_KV_USAGE, MIN_SPEED_TOK_S, WAVE_FULL_USAGE
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import (
    CrossCheckWindow,
    GpuTelemetry,
    KVCapacity,
    LatencyCheck,
    ScenarioSummary,
    ServerVsClient,
    Summary,
)


@dataclass(frozen=True)
class TableView:
    """A Markdown table: header, rows of cell text, and per column ``l`` or ``r`` alignment."""

    columns: list[str]
    rows: list[list[str]]
    align: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.align:
            self.align.extend(["l"] + ["r"] * (len(self.columns) - 1))


class PairSection(TypedDict):
    title: str
    figure: Markup | None
    table: TableView
    not_run: list[str]  # the pair's points that were not run, each with why


class SaturationRule(TypedDict):
    """The thresholds of :mod:`cardgen.saturation`, for the card's method text."""

    max_kv_usage: float
    min_speed_tok_s: float
    wave_full_usage: float


class CardContext(TypedDict):
    s: Summary
    title: str
    front_matter: Markup
    banner: str | None
    card_date: str
    figures: dict[str, Markup | None]
    main: TableView
    pairs: list[PairSection]
    capacity: TableView | None
    scale: TableView | None
    kv_estimates: TableView | None
    waves: TableView | None
    serving: TableView | None
    fastgen: TableView | None
    batch_latency: TableView | None
    batch_throughput: TableView | None
    parameters: TableView
    launch: TableView | None
    gpu: TableView | None
    gpu_per_device: TableView | None
    gpu_reason: str
    server_latency: TableView | None
    server_tokens: TableView | None
    server_points: TableView | None
    server_notes: list[str]
    scenarios: TableView | None
    saturation: SaturationRule
    interactivity: TableView | None  # throughput against interactivity, Pareto fronts (issue 14): _interactivity
    workloads: WorkloadSections  # dataset serving tests, prefix cache, chat (issue 11): _workload_sections
    modelled_error: ModelledError | None  # a modelled run's expected error per headline (issue 12): _modelled_error


def card_date(info: RunInfo, *, environ: dict[str, str] | None = None) -> str:
    """The date printed on the card: ``SOURCE_DATE_EPOCH`` when set (reproducible builds), else the day the run
    ended (or started). Never the wall clock, so rendering twice gives the same bytes."""
    env = os.environ if environ is None else environ
    raw = env.get("SOURCE_DATE_EPOCH")
    if raw:
        try:
            when = _dt.datetime.fromtimestamp(int(raw), _dt.UTC)
        except (ValueError, OverflowError, OSError):
            raise RenderError(f"SOURCE_DATE_EPOCH must be a Unix time in seconds, not {raw!r}") from None
        return when.strftime("%Y-%m-%d")
    return (info.ended_at or info.started_at or "")[:10]


def _title(s: Summary) -> str:
    engine = " ".join(x for x in (s.engine, s.engine_version) if x)
    where = f" on {s.gpu}" if s.gpu else ""
    return f"Performance card: {s.model}{where}" + (f" ({engine})" if engine else "")


def _banner(s: Summary) -> str | None:
    if not s.modelled:
        return None
    by = s.modelled_by or "cardgen's virtual GPU server"
    return (f"MODELLED, NOT MEASURED. Every figure on this card was produced by {by}, not measured on real "
            "hardware. Use it for capacity planning; measure before you rely on it.")


def _front_matter(s: Summary) -> Markup:
    tags = ["benchmark", "cardgen"]
    for extra in (s.engine, s.gpu, "modelled" if s.modelled else "measured"):
        if extra:
            slug = slugify(extra)
            if slug not in tags:
                tags.append(slug)

    def r(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")

    h = s.headline
    data: dict[str, Any] = {
        "base_model": s.model,
        "tags": tags,
        "cardgen": {
            "schema_version": s.schema_version,
            "modelled": s.modelled,
            **({"modelled_by": s.modelled_by} if s.modelled else {}),
            "headline": {
                "prompt_ingestion_tok_s": r(h.prompt_ingestion_tok_s),
                "generation_tok_s_at_10_parallel_1024_128": r(h.generation_tok_s_at_10_parallel_1024_128),
                "decode_tok_s_at_10_parallel_1024_128": r(h.decode_tok_s_at_10_parallel_1024_128),
                "kv_cache_tokens": r(h.kv_cache_tokens),
                "kv_cache_method": s.kv_cache_method,
            },
            "provenance": {
                "model": s.model, "served_model": s.served_model, "engine": s.engine,
                "engine_version": s.engine_version, "gpu": s.gpu, "gpu_count": s.gpu_count, "suite": s.suite,
                "started_at": s.started_at, "ended_at": s.ended_at, "run_status": s.run_status,
                "cardgen_version": s.cardgen_version, "requests_total": s.requests_total,
                "requests_failed": s.requests_failed, "summary": "summary.json",
            },
        },
    }
    return front_matter(data)


def _used(point: ScenarioSummary | None, n: int) -> str:
    """"over 40 steady requests (20 ramp / drain left out)" or "over 20 requests (too short for a steady
    state)": which requests a closed-loop point's medians come from."""
    if point is None or point.steady_state is None:
        return f"over {n} requests"
    if point.steady_state:
        return f"over {n} steady requests ({point.ramp_drain_requests} ramp / drain left out)"
    return f"over {n} requests (too short for a steady state: ramp and drain kept)"


def _main(s: Summary) -> TableView:
    rows = []
    hp = s.headline_precision
    ing = s.ingestion
    if ing is not None and ing.tok_s:
        how = (f"1 / slope of TTFT against prompt tokens, robust fit over {ing.n_used} of {ing.n_points} "
               f"requests; fixed overhead {fmt.ms(ing.intercept_s)}")
        rows.append(["Prompt ingestion speed", fmt.tok_s(ing.tok_s),
                     fmt.interval(ing.tok_s_slope_ci_low, ing.tok_s_slope_ci_high), fmt.half_width(hp.prompt_ingestion_tok_s),
                     how])
    else:
        rows.append(["Prompt ingestion speed", "not measured", fmt.DASH, fmt.DASH, "no usable ingestion sweep"])
    point = (f"{HEADLINE_POINT['parallel']} parallel requests, {HEADLINE_POINT['prompt_tokens']} prompt tokens, "
             f"{HEADLINE_POINT['output_tokens']} generated")
    g = s.generation
    if g is not None:
        scenario = next((x for x in s.scenarios if x.scenario == g.scenario), None)
        rows.append([f"Generation speed per request ({point})", fmt.tok_s(g.speed_from_start_tok_s),
                     fmt.interval(g.speed_from_start_ci_low, g.speed_from_start_ci_high),
                     fmt.half_width(hp.generation_tok_s_at_10_parallel_1024_128),
                     f"median speed from start (output tokens / E2E) {_used(scenario, g.requests)}"
                     + (f"; median TTFT {fmt.half_width(hp.ttft_s_at_10_parallel_1024_128)}"
                        if hp.ttft_s_at_10_parallel_1024_128 is not None else "")])
        rows.append([f"Decode speed per request ({point})", fmt.tok_s(g.decode_tok_s),
                     fmt.interval(g.decode_ci_low, g.decode_ci_high),
                     fmt.half_width(hp.decode_tok_s_at_10_parallel_1024_128),
                     "median (output tokens - 1) / (E2E - TTFT): generation after the first token"])
    else:
        rows.append([f"Generation speed per request ({point})", "not measured", fmt.DASH, fmt.DASH,
                     "no such point in the run"])
    kv = s.kv_cache
    if kv.tokens is not None:
        spread = fmt.DASH
        chosen = next((e for e in kv.estimates if e.method == kv.method), None)
        if chosen is not None and chosen.low is not None:
            spread = fmt.integer_interval(chosen.low, chosen.high)
        agree = (f"; other methods within {fmt.sig(kv.agreement_pct)} %" if kv.agreement_pct is not None else "")
        exact = kv.method == "server_config"  # the server says how many tokens it holds
        rows.append(["KV cache capacity", fmt.tokens(kv.tokens), spread,
                     "exact" if exact else fmt.half_width(hp.kv_cache_tokens),
                     f"method: {kv.method}{agree}"])
    elif kv.lower_bound is not None:
        rows.append(["KV cache capacity", f"≥ {fmt.tokens(kv.lower_bound)}", fmt.DASH, fmt.DASH,
                     "lower bound: the growing waves never saturated the server"])
    else:
        rows.append(["KV cache capacity", "not measured", fmt.DASH, fmt.DASH, "no method applied (see KV cache)"])
    return TableView(["Metric", "Value", "95 % interval", "Precision", "How"], rows, ["l", "r", "r", "r", "l"])


def precision_text(x: ScenarioSummary) -> str:
    """The precision a point reached, e.g. ``±1.8 % / ±2.4 %`` (closed loop: speed from start / TTFT),
    ``±0.9 % (slope)``, ``±0.5 % (mean decode)``; with its target when it had one."""
    p = x.precision
    if p is None:
        text = fmt.DASH
    elif x.kind == "closed":
        text = (f"{fmt.half_width(p.speed_from_start)} / {fmt.half_width(p.ttft)}"
                if p.speed_from_start is not None or p.ttft is not None else fmt.DASH)
    elif x.kind == "ingest":
        text = f"{fmt.half_width(p.slope)} (slope)" if p.slope is not None else fmt.DASH
    elif x.kind == "batch":
        text = f"{fmt.half_width(p.decode)} (mean decode)" if p.decode is not None else fmt.DASH
    else:
        text = fmt.DASH
    if x.target_ci is not None:
        text += f"; target {fmt.half_width(x.target_ci)}"
    return text


def _saturated_by(x: ScenarioSummary, scenarios: Sequence[ScenarioSummary]) -> ScenarioSummary | None:
    """The closed-loop point of the same suite entry and pair, with fewer users, that saturated the server."""
    smaller = [o for o in scenarios if o.kind == "closed" and o.saturation and o.group == x.group
               and (o.prompt_tokens, o.output_tokens) == (x.prompt_tokens, x.output_tokens)
               and (o.parallel or 0) < (x.parallel or 0)]
    return min(smaller, key=lambda o: o.parallel or 0) if smaller else None


def stop_text(x: ScenarioSummary, scenarios: Sequence[ScenarioSummary] = ()) -> str:
    """Why a point stopped, in words: run.json's reason and detail. A skipped point: "not run: the server
    saturated at N parallel (why)"; a point never reached: "not run"."""
    if x.requests == 0 and x.stop in (None, "skipped"):
        by = _saturated_by(x, scenarios) if x.stop else None
        if by is not None:
            return f"not run: the server saturated at {by.parallel} parallel ({by.saturation})"
        detail = (x.stop_detail or "").removeprefix("not run: ")
        return f"not run: {detail}" if detail else "not run"
    text = x.stop or fmt.DASH
    if x.stop_detail and x.stop_detail != x.stop:
        text += f": {x.stop_detail}"
    if x.saturation and x.saturation not in text:
        text += f"; saturated the server ({x.saturation})"
    return text


def steady_text(x: ScenarioSummary) -> str:
    """The requests a closed-loop point's figures come from: its steady ones, or all when it was too short."""
    if x.steady_state is None:
        return fmt.DASH
    return str(x.steady_requests) if x.steady_state else "too short: all"


def ramp_drain_text(x: ScenarioSummary) -> str:
    """How many requests a closed-loop point left out as ramp and drain (scenario table)."""
    if x.steady_state is None:
        return fmt.DASH
    return str(x.ramp_drain_requests) if x.steady_state else "0 (too short)"


def _pair_table(points: Sequence[ScenarioSummary]) -> TableView:
    rows = []
    for p in points:
        sp = p.speed_from_start_tok_s
        rows.append([
            str(p.parallel), str(p.requests), steady_text(p), str(p.failed), fmt.sig(sp.p50),
            fmt.interval(sp.p50_ci_low, sp.p50_ci_high), fmt.interval(sp.p25, sp.p75), fmt.sig(p.decode_tok_s.p50),
            fmt.ms(p.ttft_s.p50), fmt.ms(p.ttft_s.p90), fmt.ms(p.tpot_s.p50), fmt.ms(p.itl_s.p50),
            fmt.secs(p.e2e_s.p50), fmt.sig(p.output_tok_s), fmt.pct(p.kv_usage_max), precision_text(p),
        ])
    return TableView(["Parallel", "Requests", "Steady", "Failed", "Speed from start p50 (tok/s)", "95 % CI",
                      "p25–p75", "Decode p50 (tok/s)", "TTFT p50", "TTFT p90", "TPOT p50", "ITL p50", "E2E p50",
                      "Total output (tok/s)", "Max KV usage", "Precision (speed / TTFT)"], rows)


def _not_run(s: Summary, pair: tuple[int, int]) -> list[str]:
    """The closed-loop points of a prompt / output pair that sent no request, grouped by why: "8, 16
    parallel: the server saturated at 4 parallel (KV cache 97% full)"."""
    why: dict[str, list[str]] = {}
    for x in s.scenarios:
        if x.kind == "closed" and x.requests == 0 and (x.prompt_tokens, x.output_tokens) == pair:
            reason = stop_text(x, s.scenarios).removeprefix("not run").removeprefix(": ")
            why.setdefault(reason, []).append(str(x.parallel))
    return [f"{', '.join(counts)} parallel" + (f": {reason}" if reason else "") for reason, counts in why.items()]


def _capacity(s: Summary) -> TableView | None:
    if not s.capacity:
        return None
    rows = []
    for c in s.capacity:
        def bound(value: int | None, is_open: bool) -> str:
            if value is None:
                return "unknown"
            if value == 0:
                return "none tested"
            return f"≥ {value}" if is_open else str(value)
        rows.append([f"{c.prompt_tokens} / {c.output_tokens}", ", ".join(map(str, c.parallel_tested)),
                     bound(c.max_parallel_at_min_speed, c.speed_bound_open),
                     bound(c.max_parallel_below_kv_usage, c.kv_bound_open)])
    c0 = s.capacity[0]
    return TableView(["Prompt / output tokens", "Parallel tested",
                      f"Most parallel at ≥ {fmt.sig(c0.min_speed_tok_s)} tok/s each",
                      f"Most parallel below {fmt.pct(c0.max_kv_usage)} KV usage"], rows, ["l", "l", "r", "r"])


def _frame_view(df: pd.DataFrame, formats: dict[str, Any]) -> TableView | None:
    """A DataFrame as a view: each column formatted by ``formats[column]`` (default: str, NaN as a dash)."""
    if df is None or df.empty:
        return None
    rows = []
    for record in df.to_dict("records"):
        row = []
        for col in df.columns:
            v = record[col]
            f = formats.get(col)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row.append(fmt.DASH)
            elif f is not None:
                row.append(f(v))
            else:
                row.append(str(v))
        rows.append(row)
    return TableView([str(c) for c in df.columns], rows)


def _numbers(df: pd.DataFrame, skip: Sequence[str] = ()) -> dict[str, Any]:
    return {c: fmt.sig for c in df.columns if c not in skip and pd.api.types.is_float_dtype(df[c])}


def _batch(df: pd.DataFrame, metric: str) -> TableView | None:
    if df is None or df.empty:
        return None
    part = df[df["Metric"] == metric]
    if part.empty:
        return None
    rows = []
    last_step = None
    for rec in part.to_dict("records"):
        unit = " ms" if rec["Unit"] == "ms" else " tokens/s"
        step = rec["Step"] if rec["Step"] != last_step else ""
        last_step = rec["Step"]
        ci = fmt.interval(rec.get("Average CI low"), rec.get("Average CI high"))
        ci = ci if ci == fmt.DASH else ci + unit
        rows.append([step, str(rec["Batch Size"]), fmt.sig(rec["Average"]) + unit, ci]
                    + [fmt.sig(rec[c]) + unit for c in ("Lowest", "Highest", "p50", "p90", "p99")]
                    + [str(rec["Runs"])])
    return TableView(["Step", "Batch Size", "Average", "95 % CI of the average", "Lowest", "Highest", "p50", "p90",
                      "p99", "Runs"], rows, ["l"] + ["r"] * 9)


def _kv_views(kv: KVCapacity) -> tuple[TableView | None, TableView | None]:
    est = None
    if kv.estimates:
        rows = []
        for e in kv.estimates:
            value = fmt.tokens(e.tokens) if e.tokens is not None else (
                f"≥ {fmt.tokens(e.lower_bound)}" if e.lower_bound is not None else fmt.DASH)
            chosen = " (chosen)" if e.method == kv.method else ""
            rows.append([e.method + chosen, value, fmt.integer_interval(e.low, e.high),
                         fmt.signed_pct(e.vs_chosen_pct) if e.method != kv.method else fmt.DASH, e.source])
        est = TableView(["Method", "Tokens", "Spread", "vs chosen", "Based on"], rows, ["l", "r", "r", "r", "l"])
    waves = None
    if kv.waves:
        rows = []
        for w in kv.waves:
            signals = [name for name in ("queued", "preempted", "waiting", "stalled") if getattr(w, name)]
            rows.append([str(w.wave), str(w.size), fmt.integer(w.tokens_per_request),
                         fmt.integer(None if w.tokens_per_request is None else w.size * w.tokens_per_request),
                         fmt.pct(w.kv_usage_max), ", ".join(signals) or "no"])
        waves = TableView(["Wave", "Requests", "Tokens per request", "Tokens in the wave", "Max KV usage",
                           "Saturated"], rows, ["l", "r", "r", "r", "r", "l"])
    return est, waves


def _parameters(s: Summary, info: RunInfo, date: str) -> TableView:
    o = s.options
    rows = [
        ["Model", s.model], ["Served model id", s.served_model or fmt.DASH],
        ["Engine", s.engine or fmt.DASH], ["Engine version", s.engine_version or fmt.DASH],
        ["GPU", s.gpu or fmt.DASH], ["GPU count", str(s.gpu_count) if s.gpu_count is not None else fmt.DASH],
        ["GPU driver", s.gpu_driver or fmt.DASH],
        ["Figures", f"modelled by {s.modelled_by}" if s.modelled else "measured"],
        ["cardgen version (measurement)", s.cardgen_version or fmt.DASH], ["Suite", s.suite or fmt.DASH],
        ["Prompt sizing", info.server.tokenizer],
        ["Load generator processes", (str(info.workers) if info.workers else fmt.DASH)
         + (" (--workers auto)" if info.workers_choice else "")],
        ["Run started (UTC)", s.started_at or fmt.DASH], ["Run ended (UTC)", s.ended_at or fmt.DASH],
        ["Run status", s.run_status or fmt.DASH],
        ["Requests (failed)", f"{s.requests_total} ({s.requests_failed})"],
        *([["Superseded records (kept on disk, not counted)", str(s.superseded_requests)]]
          if s.superseded_requests else []),
        ["SLOs for goodput", f"TTFT ≤ {fmt.secs(o.get('slo_ttft_s'))}, TPOT ≤ {fmt.ms(o.get('slo_tpot_s'))}"],
        ["Capacity thresholds", f"≥ {fmt.tok_s(o.get('min_speed_tok_s'))} per request; KV usage < "
                                f"{fmt.pct(o.get('max_kv_usage'))}"],
        ["Card date", date or fmt.DASH],
    ]
    return TableView(["Parameter", "Value"], rows, ["l", "l"])


_LAUNCH_SKIP = {"pid", "log", "started_unix", "url", "host", "port", "server_reported"}  # machine-local details
_LAUNCH_FIRST = ("engine", "engine_version", "command")
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
def _argv_rows(args: list[str]) -> list[list[str]]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` pairs of an (already redacted) argument list."""
    rows, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and "=" in arg:
            rows.append(list(arg.split("=", 1)))
        elif arg.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            rows.append([arg, args[i + 1]])
            i += 1
        else:
            rows.append([arg, "true"] if arg.startswith("-") else ["(positional)", arg])
        i += 1
    return rows


def _masked(name: str, value: Any) -> str:
    """``value`` as text, masked when ``name`` says it is a secret (a bare flag or an unset value is shown)."""
    if isinstance(value, bool) or value is None or value == "":
        return _plain(value)
    return MASK if is_secret_flag(name) else _plain(value)


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _launch(info: RunInfo) -> TableView | None:
    """How the engine was started, when cardgen started it: its arguments (as a model card's parameter table),
    the command, the version and the recorded environment. Secret flags and variables are masked again."""
    launch = info.server.launch
    if not launch:
        return None
    rows: list[list[str]] = []
    keys = [k for k in _LAUNCH_FIRST if k in launch] + [k for k in launch if k not in _LAUNCH_FIRST]
    for key in keys:
        value = launch[key]
        if key in _LAUNCH_SKIP:
            continue
        if key == "command" and isinstance(value, list):
            rows.append(["command", shlex.join(redact_argv([str(v) for v in value]))])
        elif key == "arguments" and isinstance(value, dict):
            for k, v in value.items():
                flag = f"--{str(k).replace('_', '-')}" if k != "positional" else "positional"
                rows.append([flag, _masked(flag, v) if k != "positional" else _plain(v)])
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            if key != "engine_args" or "arguments" not in launch:  # the same arguments, already shown
                rows += _argv_rows(redact_argv(value))
        elif isinstance(value, dict):
            rows += [[f"{key} {k}", MASK if any(w in str(k).upper() for w in _SECRET_WORDS) or is_secret_key(str(k))
                      else _plain(v)] for k, v in value.items()]
        else:
            rows.append([str(key), _masked(str(key), value)])
    return TableView(["Argument", "Value"], rows, ["l", "l"])


_GPU_SOURCES = {"nvml": "NVML (nvidia-ml-py) on the machine that ran cardgen",
                "dcgm": "the GPU host's DCGM exporter (--gpu-metrics-url)"}


def _gpu(g: GpuTelemetry) -> tuple[TableView | None, TableView | None]:
    """The GPU part of the parameters: what the telemetry said over the measured window (measured runs only)."""
    if g.status != "measured":
        return None, None
    count = g.count or len(g.per_gpu) or None
    peak = fmt.gib(g.peak_memory_bytes)
    if g.memory_total_bytes and g.peak_memory_bytes is not None:
        peak += f" of {fmt.gib(g.memory_total_bytes)}"
    if (count or 0) > 1 and g.peak_memory_total_bytes is not None:
        peak += f" (all GPUs together: {fmt.gib(g.peak_memory_total_bytes)})"
    energy = fmt.joules(g.energy_j) + (f" ({g.energy_source})" if g.energy_source else "")
    rows = [
        ["GPU", g.name or fmt.DASH], ["GPU count", str(count) if count else fmt.DASH],
        ["Driver", g.driver or fmt.DASH],
        ["Telemetry", _GPU_SOURCES.get(g.source or "", g.source or fmt.DASH)],
        ["Records in the measured window", f"{g.samples:,} (one per GPU per sample) over {fmt.secs(g.duration_s)}"],
        ["Peak memory used (one GPU)", peak],
        ["Mean utilization", fmt.sig(g.mean_utilization_pct) + " %" if g.mean_utilization_pct is not None
         else fmt.DASH],
        ["Mean power (per GPU)", fmt.watts(g.mean_power_w)],
        ["Energy (all GPUs)", energy],
        ["Energy per output token", f"{fmt.sig(g.j_per_output_token)} J/token over {fmt.integer(g.output_tokens)} "
                                    "output tokens" if g.j_per_output_token is not None else fmt.DASH],
    ]
    per = None
    if len(g.per_gpu) > 1:
        per = TableView(["GPU", "Peak memory used", "Mean utilization", "Mean power", "Energy", "Samples"],
                        [[str(p.gpu), fmt.gib(p.peak_memory_bytes),
                          fmt.sig(p.mean_utilization_pct) + " %" if p.mean_utilization_pct is not None else fmt.DASH,
                          fmt.watts(p.mean_power_w), fmt.joules(p.energy_j), str(p.samples)] for p in g.per_gpu])
    return TableView(["GPU", "Value"], rows, ["l", "l"]), per


def _no_telemetry_reason(g: GpuTelemetry) -> str:
    """Why there is no telemetry, as recorded, without repeating "no GPU telemetry" (the card says it first)."""
    reason = (g.reason or "no reason recorded").strip()
    if reason.lower().startswith(NO_TELEMETRY.lower()):
        reason = reason[len(NO_TELEMETRY):].lstrip(" :-–") or "no reason recorded"
    return reason


_LATENCY_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E latency", "queue": "Queue time (server only)"}


def _server_p(value: float | None, bucket: list[float | None] | None) -> str:
    if value is None:
        return fmt.DASH
    if not bucket:
        return fmt.ms(value)
    low, high = bucket
    span = f"{fmt.sig((low or 0) * 1000)}–{fmt.sig(high * 1000)} ms" if high is not None else \
        f"> {fmt.sig((low or 0) * 1000)} ms"
    return f"{fmt.ms(value)} (bucket {span})"


def _p_diff(diff: float | None, client: float | None, bucket: list[float | None] | None) -> str:
    """The difference of two percentiles, saying when the client's value lies inside the server's bucket (the two
    agree as far as the histogram can tell)."""
    text = fmt.signed_ms(diff)
    if diff is None or client is None or not bucket:
        return text
    low, high = bucket
    inside = (low or 0.0) <= client and (high is None or client <= high)
    return f"{text}, inside the bucket" if inside else text


def _latency_rows(c: LatencyCheck) -> list[list[str]]:
    label = _LATENCY_LABELS.get(c.metric, c.metric)
    unit = "tokens" if c.metric == "itl" else "requests"
    client = c.metric != "queue"
    n_diff = (fmt.signed_integer(c.client_count - c.server_count) if client and c.server_count is not None
              else fmt.DASH)
    return [
        [label, f"count ({unit})", f"{c.client_count:,}" if client else fmt.DASH, fmt.integer(c.server_count),
         n_diff],
        [label, "mean", fmt.ms(c.client_mean_s) if client else fmt.DASH, fmt.ms(c.server_mean_s),
         fmt.signed_ms(c.diff_mean_s)],
        [label, "p50", fmt.ms(c.client_p50_s) if client else fmt.DASH, _server_p(c.server_p50_s, c.server_p50_bucket_s),
         _p_diff(c.diff_p50_s, c.client_p50_s, c.server_p50_bucket_s)],
        [label, "p90", fmt.ms(c.client_p90_s) if client else fmt.DASH, _server_p(c.server_p90_s, c.server_p90_bucket_s),
         _p_diff(c.diff_p90_s, c.client_p90_s, c.server_p90_bucket_s)],
    ]


def _window_notes(w: CrossCheckWindow, where: str) -> list[str]:
    notes = []
    by = {c.metric: c for c in w.latencies}
    ttft = by.get("ttft")
    if ttft is not None and ttft.server_count is not None and ttft.server_count != ttft.client_count:
        notes.append(f"{where}: the server counted {fmt.integer(ttft.server_count)} first tokens, the client "
                     f"{ttft.client_count:,}: the two sides do not cover exactly the same requests (a first token in "
                     "flight at a scrape, failed requests, or another client of the server)")
    if w.straddling:
        notes.append(f"{where}: {w.straddling} requests were only partly inside the window (sent before its first "
                     "scrape or ended after its last); each of their figures counts where it fell")
    if w.requests_failed:
        notes.append(f"{where}: {w.requests_failed} failed requests are left out of the client's figures; the "
                     "server may have counted their tokens")
    notes += [f"{where}, {_LATENCY_LABELS.get(c.metric, c.metric)}: {c.note}" for c in w.latencies if c.note]
    return notes


def _server_vs_client(v: ServerVsClient) -> tuple[TableView | None, TableView | None, TableView | None, list[str]]:
    """The whole run's latencies and tokens, server against client, the closed-loop points' means, and notes."""
    if not v.available or v.run is None:
        return None, None, None, []
    run = v.run
    present = [c for c in run.latencies if c.server_metric is not None]
    latency = None
    if present:
        rows = [row for c in present for row in _latency_rows(c)]
        latency = TableView(["Latency", "Statistic", "Client", "Server", "Client − server"], rows,
                            ["l", "l", "r", "r", "r"])
    token_rows = [[f"{t.tokens} tokens", ("≈ " if t.approximate else "") + fmt.integer(t.client_tokens),
                   fmt.integer(t.server_tokens),
                   fmt.signed_integer(t.diff), t.server_counter or fmt.DASH] for t in run.tokens]
    tokens = TableView(["Tokens", "Client (Σ usage)", "Server (counter increase)", "Client − server", "Counter"],
                       token_rows, ["l", "r", "r", "r", "l"])
    points = None
    if v.points and present:
        rows = []
        for w in v.points:
            by = {c.metric: c for c in w.latencies}
            e2e = by.get("e2e")
            row = [w.scope, f"{w.requests} / {fmt.integer(e2e.server_count) if e2e else fmt.DASH}"]
            for metric in ("ttft", "itl", "e2e"):
                c = by.get(metric)
                if c is None or c.server_metric is None:
                    row += [fmt.DASH, fmt.DASH]
                else:
                    row += [f"{fmt.ms(c.client_mean_s)} / {fmt.ms(c.server_mean_s)}", fmt.signed_ms(c.diff_mean_s)]
            rows.append(row)
        points = TableView(["Point", "Requests (client / server)", "TTFT mean (client / server)", "Δ TTFT",
                            "ITL mean (client / server)", "Δ ITL", "E2E mean (client / server)", "Δ E2E"], rows,
                           ["l", "r", "r", "r", "r", "r", "r", "r"])
    notes = _window_notes(run, "Whole run")
    for w in v.points:
        notes += _window_notes(w, w.scope)
    return latency, tokens, points, notes


def _scenarios(s: Summary) -> TableView | None:
    if not s.scenarios:
        return None
    rows = []
    for x in s.scenarios:
        load = (f"{x.parallel} parallel" if x.kind in ("closed", "batch", "chat") else
                ("all at once" if x.all_at_once else f"{x.rate_label} req/s") if x.kind == "open" else
                (f"waves up to {x.parallel}" if x.kind == "waves" else "one at a time"))
        ran = x.requests > 0
        rows.append([x.scenario, x.kind, f"{x.prompt_tokens} / {x.output_tokens}", load, str(x.requests),
                     ramp_drain_text(x) if ran else fmt.DASH, fmt.pct(x.failure_rate) if ran else fmt.DASH,
                     fmt.sig(x.req_s), fmt.sig(x.output_tok_s), fmt.sig(x.goodput_req_s), fmt.secs(x.duration_s),
                     precision_text(x) if ran else fmt.DASH, stop_text(x, s.scenarios), x.client or fmt.DASH])
    return TableView(["Scenario", "Kind", "Prompt / output tokens", "Load", "Requests", "Ramp / drain left out",
                      "Failed", "req/s", "Output tok/s", "Goodput (req/s)", "Duration", "Precision", "Stopped",
                      "Client"],
                     rows, ["l", "l", "l", "l"] + ["r"] * 8 + ["l", "l"])


class DatasetSection(TypedDict):
    """One dataset suite entry: what was sampled and how, and the lengths that were sent."""

    group: str
    dataset: str
    num_requests: int
    seed: int
    endpoint: str
    rule: str
    lengths: TableView | None
    length_stats: TableView | None
    sent: int


class PrefixSection(TypedDict):
    """One shared-prefix point: cold against warm."""

    scenario: str
    prefixes: int
    prefix_tokens: int
    suffix_tokens: int
    table: TableView
    speedup: str
    counters: str | None


class ChatSection(TypedDict):
    """One chat entry: TTFT per turn number, with and without the prefix cache."""

    scenario: str
    users: int
    conversations: int
    think_time_s: float
    table: TableView
    hit_rates: str | None
    counters: str | None
    compared: bool  # the same conversations also ran with the cache defeated


class WorkloadSections(TypedDict):
    nightly: TableView | None  # seed 003's serving table, its columns exactly
    nightly_json: Markup | None
    datasets: list[DatasetSection]
    prefix: list[PrefixSection]
    chat: list[ChatSection]


def _chat_sections(results: Sequence[Any]) -> list[ChatSection]:
    out = []
    for r in results:
        cold = {t.turn: t for t in r.no_cache.turns} if r.no_cache is not None else {}
        rows = []
        for t in r.cached.turns:
            row = [str(t.turn), str(t.requests), fmt.sig(t.prompt_tokens.p50), _median_ci(t.ttft_s, fmt.ms),
                   fmt.ms(t.ttft_s.p99)]
            if r.no_cache is not None:
                c = cold.get(t.turn)
                warm_p50, cold_p50 = t.ttft_s.p50, c.ttft_s.p50 if c is not None else None
                row += [_median_ci(c.ttft_s, fmt.ms) if c is not None else fmt.DASH,
                        fmt.ms(cold_p50 - warm_p50) if cold_p50 is not None and warm_p50 is not None else fmt.DASH,
                        f"{cold_p50 / warm_p50:.2f}x" if cold_p50 is not None and warm_p50 else fmt.DASH]
            rows.append(row)
        columns = ["Turn", "Requests", "Prompt tokens (median)", "TTFT median (95 % CI)", "TTFT p99"]
        if r.no_cache is not None:
            columns += ["Without cache: TTFT median (95 % CI)", "Saved (median)", "Speed-up"]
        rates = None
        if r.cached.hit_rate is not None:
            rates = fmt.pct(r.cached.hit_rate)
            if r.no_cache is not None and r.no_cache.hit_rate is not None:
                rates += f" (with the cache defeated: {fmt.pct(r.no_cache.hit_rate)})"
        out.append(ChatSection(scenario=r.cached.scenario, users=r.users, conversations=r.conversations,
                               think_time_s=r.think_time_s, table=TableView(columns, rows), hit_rates=rates,
                               counters=r.counters, compared=r.no_cache is not None))
    return out


def _median_ci(d: Any, show: Any) -> str:
    if d.p50 is None:
        return fmt.DASH
    if d.p50_ci_low is None or d.p50_ci_high is None:
        return show(d.p50)
    return f"{show(d.p50)} ({show(d.p50_ci_low)} – {show(d.p50_ci_high)})"


def _prefix_sections(results: Sequence[Any]) -> list[PrefixSection]:
    out = []
    for r in results:
        rows = []
        for ph in r.phases:
            rows.append([ph.phase, str(ph.requests), fmt.sig(ph.prompt_tokens), _median_ci(ph.ttft_s, fmt.ms),
                         _median_ci(ph.ingest_tok_s, fmt.tok_s),
                         fmt.pct(ph.hit_rate) if ph.hit_rate is not None else fmt.DASH,
                         fmt.tokens(ph.hit_tokens) if ph.hit_tokens is not None else fmt.DASH])
        table = TableView(["Phase", "Requests", "Prompt tokens (median)", "TTFT median (95 % CI)",
                           "Ingestion speed median (95 % CI)", "Server hit rate", "Tokens from cache"], rows,
                          ["l", "r", "r", "r", "r", "r", "r"])
        if r.speedup is None:
            speedup = "not measured (a phase has no successful request)"
        elif r.speedup_ci is None:
            speedup = f"{r.speedup:.2f}x"
        else:
            speedup = f"{r.speedup:.2f}x (95 % CI {r.speedup_ci[0]:.2f}x – {r.speedup_ci[1]:.2f}x)"
        out.append(PrefixSection(scenario=r.scenario, prefixes=r.prefixes, prefix_tokens=r.prefix_tokens,
                                 suffix_tokens=r.suffix_tokens, table=table, speedup=speedup, counters=r.counters))
    return out


def _bar(n: int, most: int, width: int = 30) -> str:
    return "█" * max(1 if n else 0, round(width * n / most)) if most else ""


def _workload_sections(analysis: Analysis) -> WorkloadSections:
    from cardgen.analysis.serving import nightly_json
    from cardgen.datasets import describe, rule_text

    w = analysis.workloads
    if w is None:
        return WorkloadSections(nightly=None, nightly_json=None, datasets=[], prefix=[], chat=[])
    nightly = None
    if not w.nightly.empty:
        nightly = _frame_view(w.nightly, {**_numbers(w.nightly), "# of req.": lambda v: f"{v:.0f}"})
    datasets = []
    for g in w.groups:
        hist = w.lengths.get(g.group)
        lengths = stats = None
        if hist is not None:
            most = max(hist.prompts + hist.outputs)
            lengths = TableView(["Tokens", "Prompts", "", "Outputs", ""],
                                [[b, str(p), _bar(p, most), str(o), _bar(o, most)]
                                 for b, p, o in zip(hist.bins, hist.prompts, hist.outputs, strict=True)],
                                ["l", "r", "l", "r", "l"])
            stats = TableView(["Length (tokens)", "Mean", "Median", "P99", "Min", "Max"],
                              [[label, *(fmt.sig(st[k]) for k in ("mean", "median", "p99", "min", "max"))]
                               for label, st in (("Prompt", hist.prompt_stats), ("Output", hist.output_stats))])
        datasets.append(DatasetSection(group=g.group, dataset=describe(g.dataset), num_requests=g.num_requests,
                                       seed=g.seed, endpoint=g.endpoint, rule=rule_text(), lengths=lengths,
                                       length_stats=stats, sent=hist.requests if hist else 0))
    text = nightly_json(w.nightly) if nightly else None
    # cardgen's own JSON in a code fence: printed as is (json.dumps escapes no backtick: a fence inside a
    # value would end the block early, so none may stand there)
    safe = Markup(text.replace("`", "\\u0060")) if text is not None else None
    return WorkloadSections(nightly=nightly, nightly_json=safe, datasets=datasets,
                            prefix=_prefix_sections(w.prefix), chat=_chat_sections(w.chat))


class ModelledError(TypedDict):
    """How far a modelled card's headlines are from real servers: the virtual server's error on published figures
    it was not fitted to (``cardgen.sim.calibration``)."""

    table: TableView
    target_pct: float
    recorded: bool  # False: the run did not record it; this cardgen's calibration is shown


# The card's headlines and the calibration's names for them.
_MODELLED_HEADLINES = (("ingestion_tok_s", "Prompt ingestion speed", "prompt_ingestion_tok_s", fmt.tok_s),
                       ("speed_10_tok_s", "Generation speed per request (10 parallel, 1024 → 128)",
                        "generation_tok_s_at_10_parallel_1024_128", fmt.tok_s),
                       ("kv_tokens", "KV cache capacity", "kv_cache_tokens", fmt.tokens))


def _modelled_error(s: Summary, info: RunInfo) -> ModelledError | None:
    """The expected error next to each headline of a modelled run: as its run.json recorded it (the virtual
    server's ``expected_error``), else as this cardgen's calibration has it. None for a measured run."""
    if not s.modelled:
        return None
    sim = info.sim or {}
    perf = sim.get("perf") if isinstance(sim.get("perf"), dict) else {}
    record = sim.get("expected_error") or perf.get("expected_error")  # the server's own, or its model's
    recorded = isinstance(record, dict)
    if not recorded:
        try:
            from cardgen.sim.catalog import read_data
            record = read_data("expected_error.yaml")
        except (ImportError, OSError):
            return None
    figures = record.get("figures") or {}
    rows = []
    for key, label, attr, show in _MODELLED_HEADLINES:
        e, value = figures.get(key), getattr(s.headline, attr)
        if not isinstance(e, dict):
            continue
        med, most = float(e["median_abs_pct"]) / 100, float(e["max_abs_pct"]) / 100
        likely = fmt.DASH if value is None or med >= 1 else (
            f"{show(float(f'{value / (1 + med):.3g}'))} – {show(float(f'{value / (1 - med):.3g}'))}")
        rows.append([label, show(value), f"±{100 * med:.0f} %", likely, f"±{100 * most:.0f} %",
                     f"{e['within_target']} of {e['rows']}"])
    if not rows:
        return None
    table = TableView(["Headline", "Modelled", "Expected error (median)", "Real value likely in",
                       "Largest error seen", f"Within ±{float(record.get('target_pct', 15)):.0f} %"], rows)
    return ModelledError(table=table, target_pct=float(record.get("target_pct", 15)), recorded=recorded)


def _interactivity(s: Summary) -> TableView | None:
    """Throughput against interactivity, point by point (the figure's data), with the Pareto fronts marked."""
    rows = []
    for c in throughput_interactivity(s.scenarios, gpus=s.gpu_count):
        for i, n in enumerate(c.parallel):
            rows.append([f"{c.pair[0]} / {c.pair[1]}", f"{n:.0f}", fmt.sig(float(c.tok_s_per_user[i])),
                         fmt.ms(float(c.ttft_s[i])), fmt.sig(float(c.tok_s_per_gpu[i])),
                         "yes" if c.front_user[i] else "no", "yes" if c.front_ttft[i] else "no"])
    if not rows:
        return None
    return TableView(["Prompt / output tokens", "Parallel", "Tokens/s per user", "TTFT p50", "Output tokens/s per GPU",
                      "Front (per user)", "Front (TTFT)"], rows, ["l", "r", "r", "r", "r", "l", "l"])


def card_context(analysis: Analysis, *, date: str) -> CardContext:
    """Everything the card template prints, from the analysis and the figure files listed in its summary."""
    s = analysis.summary
    present = set(s.figures)

    def figure(name: str) -> Markup | None:
        path = f"{FIGURES_DIR}/{name}"
        return Markup(path) if path in present else None

    figures = {key: figure(name) for key, name in FIGURE_NAMES.items()}
    pairs: list[PairSection] = [
        PairSection(title=f"{prompt} prompt tokens, {output} generated tokens",
                    figure=figure(pair_figure_name((prompt, output))), table=_pair_table(points),
                    not_run=_not_run(s, (prompt, output)))
        for (prompt, output), points in closed_pairs(s.scenarios).items()
    ]
    t = analysis.tables
    serving = t.get("serving")
    fastgen = t.get("fastgen")
    scale = t.get("scale")
    kv_estimates, waves = _kv_views(s.kv_cache)
    gpu, gpu_per_device = _gpu(s.gpu_telemetry)
    gpu_reason = _no_telemetry_reason(s.gpu_telemetry)
    server_latency, server_tokens, server_points, server_notes = _server_vs_client(s.server_vs_client)
    return CardContext(
        s=s, title=_title(s), front_matter=_front_matter(s), banner=_banner(s), card_date=date, figures=figures,
        main=_main(s), pairs=pairs, capacity=_capacity(s),
        scale=_frame_view(scale, {**_numbers(scale), "Parallel": lambda v: f"{v:.0f}"}) if scale is not None else None,
        kv_estimates=kv_estimates, waves=waves,
        serving=_frame_view(serving.drop(columns=["GPU"]), _numbers(serving)) if serving is not None
        and not serving.empty else None,
        fastgen=_frame_view(fastgen.drop(columns=["Kind"]), {**_numbers(fastgen), "Clients": lambda v: f"{v:.0f}"})
        if fastgen is not None and not fastgen.empty else None,
        batch_latency=_batch(t.get("batch"), "latency"), batch_throughput=_batch(t.get("batch"), "throughput"),
        parameters=_parameters(s, analysis.info, date), launch=_launch(analysis.info), gpu=gpu,
        gpu_per_device=gpu_per_device, gpu_reason=gpu_reason, server_latency=server_latency, server_tokens=server_tokens,
        server_points=server_points, server_notes=server_notes, scenarios=_scenarios(s),
        saturation=SaturationRule(max_kv_usage=MAX_KV_USAGE, min_speed_tok_s=MIN_SPEED_TOK_S,
                                  wave_full_usage=WAVE_FULL_USAGE),
        interactivity=_interactivity(s),
        workloads=_workload_sections(analysis),
        modelled_error=_modelled_error(s, analysis.info),
    )
