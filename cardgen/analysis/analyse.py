"""From a parsed run to its :class:`Analysis`: the summary, the tables and the data behind the figures.

Pure: no file is read or written here (see :mod:`cardgen.analysis.rundata` and :func:`write_analysis`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cardgen.analysis.cost import point_energy, price_points, tokens_per_joule
from cardgen.analysis.crosscheck import every_window, server_vs_client
from cardgen.analysis.gpu import gpu_telemetry, modelled_gpu_name
from cardgen.analysis.ingestion import IngestionResult, fit_ingestion, ingestion_points
from cardgen.analysis.kindparts import (
    kind_kv_estimates,
    kind_missing,
    kind_precision,
    kind_results,
    kind_tables,
    record_readers,
)
from cardgen.analysis.kv import declared_kv, kv_capacity, kv_layout
from cardgen.analysis.options import AnalysisOptions
from cardgen.analysis.outcomes import counted_mask, suite_points, with_outcomes
from cardgen.analysis.predicted import in_suite_order, predicted_frame, predicted_scenarios
from cardgen.analysis.reasoning import reasons
from cardgen.analysis.replay import mark_replays, replays, window_table
from cardgen.analysis.requests import request_frame
from cardgen.analysis.rundata import RunData
from cardgen.analysis.scenarios import scenario_summaries
from cardgen.analysis.speculative import speculative_points, speculative_run
from cardgen.analysis.tables import build_tables, write_tables
from cardgen.analysis.timebudget import time_budgets
from cardgen.analysis.timeseries import server_timeseries
from cardgen.analysis.workers import slower_warnings, worker_paths
from cardgen.analysis.workloads import Workloads, workloads, write_workloads
from cardgen.engines import kv_unknown, slot_limit
from cardgen.kinds import GENERATION, INGESTION, gives, kinds_giving
from cardgen.rundir import REQUESTS_JSONL, SERVER_METRICS_JSONL, TABLES_DIR, RunDir, torn_line_warning
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import RunInfo, point_attempts, record_counts
from cardgen.schemas.summary import (
    GenerationHeadline,
    Headline,
    HeadlinePrecision,
    KVCapacity,
    PointPrecision,
    ScenarioSummary,
    Summary,
)

HEADLINE_POINT = {"parallel": 10, "prompt_tokens": 1024, "output_tokens": 128}
LOOP_LAG_WARN_S = 0.05


@dataclass
class Analysis:
    """The analysed run: ``summary`` (what summary.json holds), the per-request rows that count (superseded
    records left out), the server's time series, the ingestion fit with its points, and the tables."""

    info: RunInfo
    summary: Summary
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    ingestion: IngestionResult | None
    tables: dict[str, pd.DataFrame]
    workloads: Workloads | None = None  # dataset serving tests (cardgen.analysis.workloads)


def _name(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("name") or value.get("id")
    return str(value) if value not in (None, "") else None


def modelled_by(info: RunInfo) -> str | None:
    """The virtual server's description in words (GPU and engine profile), or None for a measured run."""
    if not info.modelled:
        return None
    sim = info.sim
    gpu = modelled_gpu_name(info)
    profile = (_name(sim.engine_profile) or _name((sim.model_extra or {}).get("profile")) or _name(sim.engine)
               if sim is not None else None)
    parts = ["cardgen's virtual GPU server"]
    if gpu:
        parts.append(f"modelling {gpu}")
    if profile:
        parts.append(f"with engine profile {profile}")
    return " ".join(parts)


def _headline_point(scenarios: list[ScenarioSummary]) -> ScenarioSummary | None:
    for s in scenarios:
        if (gives(s, GENERATION) and s.parallel == HEADLINE_POINT["parallel"]
                and s.prompt_tokens == HEADLINE_POINT["prompt_tokens"]
                and s.output_tokens == HEADLINE_POINT["output_tokens"] and s.requests - s.failed > 0):
            return s
    return None


def _kv_precision(kv: KVCapacity) -> float | None:
    """Half the chosen estimate's bracket as a fraction of it (the saturation probe); 0 for a capacity the server
    declares; None for one without an interval."""
    if kv.tokens is None:
        return None
    if kv.method == "server_config":
        return 0.0
    chosen = next((e for e in kv.estimates if e.method == kv.method), None)
    if kv.method != "saturation_probe" or chosen is None or chosen.low is None or chosen.high is None:
        return None
    return (chosen.high - chosen.low) / 2 / kv.tokens


def _headline_precision(point: ScenarioSummary | None, ingestion: IngestionResult | None,
                        kv: KVCapacity) -> HeadlinePrecision:
    p = point.precision if point is not None else None
    return HeadlinePrecision(
        prompt_ingestion_tok_s=ingestion.fit.slope_ci_relative if ingestion is not None else None,
        generation_tok_s_at_10_parallel_1024_128=p.speed_from_start if p else None,
        ttft_s_at_10_parallel_1024_128=p.ttft if p else None,
        decode_tok_s_at_10_parallel_1024_128=p.decode if p else None,
        kv_cache_tokens=_kv_precision(kv))


def _warnings(data: RunData, requests: pd.DataFrame) -> list[str]:
    info = data.info
    out = list(info.warnings)
    out += [torn_line_warning(name, n) for name, n in sorted(data.torn.items())]
    if info.status != "complete":
        out.append(f"the run's status is '{info.status}', not 'complete': figures cover what was recorded")
    if info.length_mismatches:
        out.append(f"{info.length_mismatches} successful requests returned another output length than asked")
    dialect = info.server.dialect
    unforced = dialect is not None and not dialect.forces_length
    if not requests.empty:
        ok = requests[requests["ok"] & requests["length_forced"].astype(bool)]  # a request not forced: its own end
        short = ok[ok["output_tokens"] < ok["output_tokens_target"]]
        why = (f" (nothing forced the length: the server refused {', '.join(sorted(dialect.rejected))})"
               if unforced and dialect is not None else "")
        if len(short) and not info.length_mismatches:
            out.append(f"{len(short)} of {len(ok)} successful requests ({len(short) / len(ok):.0%}) returned fewer "
                       f"output tokens than asked{why}: their figures count the tokens they did generate")
        elif unforced and len(ok):
            out.append(f"every one of {len(ok)} successful requests reached its target output length{why}")
    lag_p99 = float(np.percentile([s.loop_lag_s for s in data.loadgen], 99)) if data.loadgen else 0.0
    if lag_p99 > LOOP_LAG_WARN_S:
        out.append(f"the load generator's event loop lagged {lag_p99 * 1000:.0f} ms at p99: client timings may be "
                   "inflated")
    return out


def analyse(data: RunData, *, options: AnalysisOptions | None = None) -> Analysis:
    """Analyse a parsed run. Never raises on thin data: what could not be measured is None and named in
    ``summary.missing``."""
    options = options or AnalysisOptions()
    info = data.info
    engine = info.server.engine
    missing: list[str] = []
    attempts = point_attempts(list(info.points))
    points = suite_points(info)  # the suite's points by name, expanded once here, handed to every module after
    readers, records = record_readers(points), list[RequestRecord]()

    def reading() -> Iterator[RequestRecord]:  # the counted records of kinds that read them kept, as they are read
        for r in data.requests:
            if r.scenario in readers and record_counts(attempts, r.scenario, r.attempt):
                records.append(r)
            yield r

    # superseded records included: what the server served (as rows its writer made, unless a kind reads records)
    every = data.frame if data.frame is not None and not readers else request_frame(reading())
    counted = counted_mask(every, info.points)
    requests = every if counted.all() else every[counted].reset_index(drop=True)  # no copy when all count
    superseded = every.loc[~counted, "scenario"].value_counts().to_dict() if len(every) else {}
    ts = server_timeseries(data.metrics, engine=engine)
    if requests.empty:
        missing.append(f"{REQUESTS_JSONL} is missing or empty: the run recorded no request")
    elif not requests["ok"].any():
        kinds = requests["error_kind"].value_counts().sort_index()
        missing.append(f"no request succeeded ({len(requests)} failed: "
                       + ", ".join(f"{k} {v}" for k, v in kinds.items()) + ")")
    if ts.empty:
        missing.append(f"{SERVER_METRICS_JSONL} is missing or holds no successful scrape: no KV usage, running "
                       "or waiting figures")

    scenarios = scenario_summaries(requests, ts, slo_ttft_s=options.slo_ttft_s, slo_tpot_s=options.slo_tpot_s)
    scenarios = with_outcomes(scenarios, info, points=points,
                              superseded={str(k): int(v) for k, v in superseded.items()})
    speculative_points(data.metrics, scenarios, engine=engine)
    mark_replays(scenarios, points)
    predicted = predicted_frame(data)  # a calibrated run's predicted points (empty for any other run)
    if info.calibration is not None:
        scenarios = in_suite_order(scenarios, predicted_scenarios(data, predicted, points=points,
                                                                  slo_ttft_s=options.slo_ttft_s,
                                                                  slo_tpot_s=options.slo_tpot_s),
                                   info.calibration.order)

    ingestion = fit_ingestion(*ingestion_points(requests)) if not requests.empty else None
    judged = kind_precision(points=points, requests=requests, timeseries=ts, scenarios=scenarios, info=info,
                            records=records)  # the points whose kind judges their precision itself
    for scenario in scenarios:
        if gives(scenario, INGESTION) and scenario.requests and ingestion is not None:
            scenario.precision = PointPrecision(method="slope t interval", slope=ingestion.fit.slope_ci_relative,
                                                batches=ingestion.fit.n_used)
        elif scenario.scenario in judged:
            scenario.precision = judged[scenario.scenario]
    if requests.empty or not requests["kind"].isin(kinds_giving(INGESTION)).any():
        missing.append("no prompt-ingestion sweep (ingest scenario): prompt ingestion speed not measured")
    elif ingestion is None:
        missing.append("the ingestion sweep has fewer than 3 distinct prompt lengths that succeeded: "
                       "prompt ingestion speed not measured")
    elif ingestion.fit.tok_s is None:
        missing.append("the ingestion fit has a slope <= 0 (TTFT does not grow with the prompt): "
                       "prompt ingestion speed not measured")

    point = _headline_point(scenarios)
    generation = None
    if point is None:
        silent = next((x for x in scenarios if gives(x, GENERATION) and x.requests == 0 and x.stop == "skipped"
                       and x.parallel == HEADLINE_POINT["parallel"]
                       and x.prompt_tokens == HEADLINE_POINT["prompt_tokens"]
                       and x.output_tokens == HEADLINE_POINT["output_tokens"]), None)
        detail = (silent.stop_detail or "skipped").removeprefix("not run: ") if silent is not None else ""
        why = f" (not run: {detail})" if silent is not None else ""
        missing.append("no successful closed-loop point at 10 parallel requests with 1024 prompt / 128 output "
                       f"tokens{why}: generation speed at 10 parallel not measured")
    else:
        sfs, dec = point.speed_from_start_tok_s, point.decode_tok_s
        generation = GenerationHeadline(
            scenario=point.scenario, requests=sfs.n,
            speed_from_start_tok_s=sfs.p50, speed_from_start_ci_low=sfs.p50_ci_low,
            speed_from_start_ci_high=sfs.p50_ci_high,
            decode_tok_s=dec.p50, decode_ci_low=dec.p50_ci_low, decode_ci_high=dec.p50_ci_high)

    declared = declared_kv(data.metrics, engine=engine, server_extra=info.server.extra)
    # the kinds' own results first: a kind may estimate the KV capacity itself (the headline weighs it)
    results = kind_results(points=points, requests=requests, timeseries=ts, scenarios=scenarios, info=info,
                           records=records, predicted=predicted, metrics=data.metrics,
                           kv=kv_layout(declared, slots=slot_limit(engine, info.server.extra)), options=options)
    kv = kv_capacity(declared=declared, requests=requests, ts=ts, unknown=kv_unknown(engine, info.server.extra),
                     contributed=kind_kv_estimates(results))
    if kv.tokens is None:
        why = "; ".join(f"{method}: {reason}" for method, reason in kv.not_run.items())
        if kv.lower_bound is not None:
            missing.append(f"KV cache capacity: only a lower bound ({kv.lower_bound:,.0f} tokens) ({why})")
        else:
            missing.append(f"KV cache capacity not measured ({why})")

    missing += kind_missing(s.kind for s in scenarios if s.requests)

    gpu = info.gpu
    gpu_name = _name(gpu.name)
    tables = build_tables(scenarios, gpu=gpu_name)
    tok_s = ingestion.fit.tok_s if ingestion else None
    windows = every_window(data.metrics, every, scenarios, engine=engine)
    svc = server_vs_client(data.metrics, every, scenarios, engine=engine, windows=windows)
    summary = Summary(
        model=info.model, served_model=info.server.served_model, gpu=gpu_name,
        gpu_count=gpu.count, gpu_driver=gpu.driver or None,
        engine=engine, engine_version=info.server.engine_version, modelled=info.modelled,
        modelled_by=modelled_by(info), clock=info.clock or "real", suite=info.suite, started_at=info.started_at, ended_at=info.ended_at,
        run_status=info.status, cardgen_version=info.cardgen_version,
        prompt_ingestion_tok_s=tok_s, kv_cache_tokens=kv.tokens, kv_cache_method=kv.method,
        requests_total=len(requests), requests_failed=int((~requests["ok"]).sum()) if len(requests) else 0,
        superseded_requests=int((~counted).sum()),
        headline_precision=_headline_precision(point, ingestion, kv),
        headline=Headline(
            prompt_ingestion_tok_s=tok_s,
            generation_tok_s_at_10_parallel_1024_128=generation.speed_from_start_tok_s if generation else None,
            decode_tok_s_at_10_parallel_1024_128=generation.decode_tok_s if generation else None,
            kv_cache_tokens=kv.tokens),
        ingestion=ingestion.fit if ingestion else None, generation=generation, kv_cache=kv,
        scenarios=scenarios,
        gpu_telemetry=gpu_telemetry(info, data.gpu_metrics, every),
        server_vs_client=svc,
        time_budget=time_budgets(requests, windows, scenarios, engine=engine),
        options=asdict(options),
        tables=[], figures=[], missing=missing, warnings=_warnings(data, requests),
        reasoning=reasons(requests), speculative=speculative_run(data.metrics, engine=engine),
        calibration=info.calibration,
    )
    if summary.reasoning and point is not None:  # the user waits for the answer: its first token is a headline
        summary.headline.ttfa_s_at_10_parallel_1024_128 = point.ttfa_s.p50
    _price_and_energy(summary, data, every)
    summary.load_workers = worker_paths(requests)
    summary.warnings += slower_warnings(summary.load_workers)
    summary.replays = replays(list(points.values()), requests, ts, data.metrics, engine=engine,
                              slo_ttft_s=options.slo_ttft_s, slo_tpot_s=options.slo_tpot_s)
    tables.update({f"replay-{r.scenario}": window_table(r) for r in summary.replays if r.windows})
    summary.kinds = results
    tables.update(kind_tables(summary))
    return Analysis(info=info, summary=summary, requests=requests, timeseries=ts, ingestion=ingestion,
                    tables=tables, workloads=workloads(info, scenarios, requests, points=list(points.values())))


def _price_and_energy(summary: Summary, data: RunData, every: pd.DataFrame) -> None:
    """Costs (run.json ``price``) and tokens per joule, on ``summary``."""
    info, gpus = data.info, data.info.gpu.count or 1
    if info.price is not None:
        summary.price_per_gpu_hour, summary.price_source = info.price.usd_per_gpu_hour, info.price.source
    price_points(summary.scenarios, info.price, gpus=gpus)
    point_energy(summary.scenarios, data.gpu_metrics, every)
    ok = every[every["ok"]] if len(every) else every
    tokens_per_joule(summary.gpu_telemetry, int(np.nansum(ok["prompt_tokens"].to_numpy(dtype=float))) if len(ok) else 0)


def write_analysis(analysis: Analysis, run_dir: Path) -> None:
    """Write ``tables/`` and ``summary.json`` (the summary lists the table files)."""
    tables_dir = Path(run_dir) / TABLES_DIR
    if tables_dir.is_dir():
        for old in tables_dir.iterdir():
            if old.suffix in (".json", ".csv") and old.is_file():
                old.unlink()
    analysis.summary.tables = sorted(write_tables(analysis.tables, tables_dir)
                                     + write_workloads(analysis.workloads, tables_dir))
    RunDir(run_dir).save_summary(analysis.summary)
