"""Constrained decoding under load, from the structured points (pure): the kind's analysis (:data:`ANALYSIS`, saved
as ``summary.json`` ``kinds.structured``).

Per point (one schema at one parallel count), the warm-up pair left out:

- each arm's (constrained, free) TTFT and TPOT per request (``cardgen.outcome``), medians with a bootstrap 95 %
  interval; its **throughput** = the output tokens of its rounds / the time its rounds took (each round from its
  first send to its last end; the rounds alternate, so the other arm's time is not counted).
- **overhead** of the constraint = median constrained / median free - 1, for TTFT and for TPOT; its 95 % interval
  the 2.5th and 97.5th percentiles of that ratio over independent bootstrap resamples of the two arms (seeded).
- **valid share** = constrained answers that validated / constrained answers that came (a failed request is
  counted as failed, not as invalid); its 95 % interval Wilson's. For a tool set, an answer validates when it made
  a call, every call names a declared tool, and its arguments parse and validate against that tool's parameters.
- the warm-up pair's TTFT apart: the first constrained request pays for its grammar's compilation.
- where every constrained request failed with an HTTP status while free ones came back: "not supported by this
  server", with the server's words.

The structured-output backend is named where the run says it: the ``--structured-outputs-config`` (or
``--guided-decoding-backend``) cardgen launched vLLM with, llama.cpp's grammar sampler; otherwise "not said".
A modelled run's answers have no text: their validity is not modelled, and the overhead is the virtual server's
decode factor, labelled so.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.stats import bootstrap_medians, describe, finite
from cardgen.kinds.structured.program import ARMS, CONSTRAINED, FREE
from cardgen.kinds.structured.schema import StructuredParams
from cardgen.kinds.structured.schemas import TOOLS
from cardgen.outcome import RequestFigures
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import RunInfo
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import Distribution, KindResult, Summary

RESAMPLES = 2000
EXAMPLES = 3  # failing answers kept per point (all of them are in requests.jsonl)
FIGURE = "structured_overhead.png"  # the kind's figure, in the run's figures/
Z95 = 1.959963984540054


class ArmFigures(Saved):
    """One arm of a point (its rounds after the warm-up pair)."""

    arm: str
    requests: int
    failed: int
    prompt_tokens: float | None  # median, the server's count
    output_tokens: float | None  # median, the server's count
    ttft_s: Distribution
    tpot_s: Distribution
    throughput_tok_s: float | None


class Failure(Saved):
    """One constrained answer that did not validate (or a request that failed), as the record kept it."""

    problem: str
    answer: str | None = None


class StructuredPoint(Saved):
    scenario: str
    schema_name: str
    mode: str  # json | tools
    parallel: int
    rounds: int
    arms: list[ArmFigures]
    ttft_overhead: float | None  # median constrained / median free - 1
    ttft_overhead_ci: tuple[float, float] | None
    tpot_overhead: float | None
    tpot_overhead_ci: tuple[float, float] | None
    warmup_ttft_s: dict[str, float | None] = Field(default_factory=dict)  # the warm-up pair's, by arm
    answered: int = 0  # constrained answers that came
    parsed: int = 0
    cut_off: int = 0  # of those that did not parse, the ones max_tokens ended before they closed
    valid: int = 0
    valid_share: float | None = None
    valid_ci: tuple[float, float] | None = None
    validity_modelled: bool = False  # a modelled run: no text, no verdict
    tools_called: dict[str, int] = Field(default_factory=dict)  # tool name -> calls (tool sets)
    failures: list[Failure] = Field(default_factory=list)
    unsupported: str | None = None  # "not supported by this server: ..." where every constrained request failed
    # where every constrained answer came back with nothing of the constraint's shape (a text answer, no JSON, no
    # tool call): the server took the fields and answered as if unconstrained, in words
    ignored: str | None = None


class StructuredOutputs(KindResult):
    """Every structured point of the run that sent requests, in suite order."""

    version: int = 1
    backend: str | None = None  # the engine's structured-output backend where the run says it
    modelled_decode_factor: float | None = None  # a modelled run: the factor its constrained decode steps took
    points: list[StructuredPoint] = Field(default_factory=list)


def wilson(k: int, n: int) -> tuple[float, float] | None:
    """Wilson's 95 % interval of a share ``k`` / ``n``."""
    if n <= 0:
        return None
    p, z2 = k / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def overhead(constrained: np.ndarray, free: np.ndarray, *, seed: int = 0) -> tuple[float | None,
                                                                                    tuple[float, float] | None]:
    """median(constrained) / median(free) - 1 and its bootstrap 95 % interval (None where an arm has too few)."""
    c, f = finite(constrained), finite(free)
    if not len(c) or not len(f) or np.median(f) <= 0:
        return None, None
    point = float(np.median(c) / np.median(f) - 1.0)
    if len(c) < 2 or len(f) < 2:
        return point, None
    ratio = bootstrap_medians(c, resamples=RESAMPLES, seed=seed) / bootstrap_medians(f, resamples=RESAMPLES,
                                                                                   seed=seed + 1)
    ratio = ratio[np.isfinite(ratio)]
    if not len(ratio):
        return point, None
    lo, hi = np.quantile(ratio, [0.025, 0.975])
    return point, (float(lo - 1.0), float(hi - 1.0))


def backend(info: RunInfo) -> str | None:
    """The structured-output backend the run says its server used, in words; None where it does not say."""
    server = info.server
    if server.engine == "llamacpp":
        return "llama.cpp's grammar sampler (the JSON schema turned into a GBNF grammar)"
    command = list(server.launch.command) if server.launch is not None else []
    for i, arg in enumerate(command):
        value = None
        if arg.startswith("--structured-outputs-config") or arg.startswith("--guided-decoding-backend"):
            value = arg.partition("=")[2] or (command[i + 1] if i + 1 < len(command) else None)
        if value is None:
            continue
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        name = parsed.get("backend") if isinstance(parsed, dict) else parsed
        if name:
            return f"{name} ({arg.partition('=')[0]} of the launch command)"
    return None


def _throughput(recs: list[RequestRecord]) -> float | None:
    """Output tokens of the rounds / the time the rounds took."""
    tokens = took = 0.0
    for r in {rec.repeat for rec in recs}:
        rows = [rec for rec in recs if rec.repeat == r]
        ends = [rec.end_at for rec in rows if rec.end_at is not None]
        if not ends:
            continue
        took += max(ends) - min(rec.sent_at for rec in rows)
        tokens += sum(rec.output_tokens or 0 for rec in rows if rec.error is None)
    return tokens / took if took > 0 else None


def _median(values: list[float]) -> float | None:
    x = finite(values)
    return float(np.median(x)) if len(x) else None


def _arm(arm: str, recs: list[RequestRecord]) -> tuple[ArmFigures, np.ndarray, np.ndarray]:
    figures = [RequestFigures.of(r) for r in recs]
    ttft = np.array([f.ttft_s for f in figures], dtype=float)
    tpot = np.array([f.tpot_s for f in figures], dtype=float)
    ok = [r for r in recs if r.error is None]
    return (ArmFigures(arm=arm, requests=len(recs), failed=len(recs) - len(ok),
                       prompt_tokens=_median([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None]),
                       output_tokens=_median([float(r.output_tokens) for r in ok if r.output_tokens is not None]),
                       ttft_s=describe(ttft), tpot_s=describe(tpot), throughput_tok_s=_throughput(recs)),
            ttft, tpot)


def _unsupported(constrained: list[RequestRecord], free: list[RequestRecord]) -> str | None:
    refused = [r for r in constrained if r.error is not None and r.status is not None and r.status != 200]
    if not constrained or len(refused) < len(constrained) or not any(r.error is None for r in free):
        return None
    return f"not supported by this server: {refused[0].error}"[:240]


def point_result(point: Any, recs: list[RequestRecord], *, modelled: bool) -> StructuredPoint | None:
    params = point.params_as(StructuredParams)
    if not recs:
        return None
    steady = [r for r in recs if not r.warmup]
    by_arm = {arm: [r for r in steady if r.phase == arm] for arm in ARMS}
    warm = {arm: [r for r in recs if r.warmup and r.phase == arm] for arm in ARMS}
    arms, ttfts, tpots = [], {}, {}
    for arm in ARMS:
        figures, ttfts[arm], tpots[arm] = _arm(arm, by_arm[arm])
        arms.append(figures)
    ttft_o, ttft_ci = overhead(ttfts[CONSTRAINED], ttfts[FREE])
    tpot_o, tpot_ci = overhead(tpots[CONSTRAINED], tpots[FREE], seed=2)
    every_constrained = warm[CONSTRAINED] + by_arm[CONSTRAINED]
    extras = [r.extra or {} for r in every_constrained if r.error is None]
    answered = [e for e in extras if e.get("answered")]
    valid = sum(1 for e in answered if e.get("valid"))
    tools: dict[str, int] = {}
    for e in answered:
        if e.get("tool"):
            tools[str(e["tool"])] = tools.get(str(e["tool"]), 0) + 1
    failures = [Failure(problem=str(e.get("problem") or "did not validate"), answer=e.get("answer"))
                for e in answered if not e.get("valid")][:EXAMPLES]
    failures += [Failure(problem=f"request failed: {r.error}"[:240]) for r in every_constrained
                 if r.error is not None][:max(0, EXAMPLES - len(failures))]
    warm_ttft = {arm: (RequestFigures.of(warm[arm][0]).ttft_s if warm[arm] and warm[arm][0].error is None
                       else None) for arm in ARMS}
    return StructuredPoint(
        scenario=point.name, schema_name=params.schema, mode=params.mode, parallel=point.parallel or 1,
        rounds=params.rounds, arms=arms, ttft_overhead=ttft_o, ttft_overhead_ci=ttft_ci, tpot_overhead=tpot_o,
        tpot_overhead_ci=tpot_ci, warmup_ttft_s={k: (None if v is None or math.isnan(v) else v)
                                                 for k, v in warm_ttft.items()},
        answered=len(answered), parsed=sum(1 for e in answered if e.get("parsed")), valid=valid,
        cut_off=sum(1 for e in answered if e.get("cut_off")),
        valid_share=valid / len(answered) if answered and not modelled else None,
        valid_ci=wilson(valid, len(answered)) if not modelled else None, validity_modelled=modelled,
        tools_called=tools, failures=failures if not modelled else [],
        unsupported=_unsupported(every_constrained, warm[FREE] + by_arm[FREE]),
        ignored=None if modelled else _ignored(params.mode, answered))


def _ignored(mode: str, answered: list[dict[str, Any]]) -> str | None:
    if not answered or not all(e.get("unshaped") for e in answered):
        return None
    shape = "made a tool call" if mode == TOOLS else "began as JSON"
    return (f"The server seems to ignore the constraint: none of the {len(answered)} constrained answers {shape} "
            "(it took the fields and answered as if unconstrained).")


def analyse(run: KindRun) -> StructuredOutputs | None:
    """One figure set per structured point that sent requests; None where none did."""
    modelled = run.info.modelled or run.info.clock == "virtual"
    by_point: dict[str, list[RequestRecord]] = {}
    for r in run.records:
        by_point.setdefault(r.scenario, []).append(r)
    out = [p for point in run.points if (p := point_result(point, by_point.get(point.name, []),
                                                           modelled=modelled)) is not None]
    if not out:
        return None
    factor = run.points[0].params_as(StructuredParams).decode_factor if modelled else None
    return StructuredOutputs(backend=None if modelled else backend(run.info), modelled_decode_factor=factor,
                             points=out)


def tables(result: StructuredOutputs, s: Summary) -> dict[str, pd.DataFrame]:
    """``tables/structured.*``: each point's arms; ``tables/structured_failures.*``: its failing answers kept."""
    rows, failures = [], []
    for p in result.points:
        for a in p.arms:
            rows.append({"scenario": p.scenario, "schema": p.schema_name, "mode": p.mode, "parallel": p.parallel,
                         "arm": a.arm, "requests": a.requests, "failed": a.failed, "ttft_p50_s": a.ttft_s.p50,
                         "tpot_p50_s": a.tpot_s.p50, "throughput_tok_s": a.throughput_tok_s,
                         "valid_share": p.valid_share if a.arm == CONSTRAINED else None})
        failures += [{"scenario": p.scenario, "schema": p.schema_name, "problem": f.problem, "answer": f.answer}
                     for f in p.failures]
    return {"structured": pd.DataFrame(rows), "structured_failures": pd.DataFrame(failures)}


ANALYSIS = KindAnalysis(result=StructuredOutputs, analyse=analyse, tables=tables, reads_records=True)
