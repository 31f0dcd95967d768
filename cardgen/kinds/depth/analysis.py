"""Speed at context depth, from the depth points (pure): the kind's analysis (:data:`ANALYSIS`, saved as
``summary.json`` ``kinds.depth``). For each depth d, over the requests at depth (the fill left out):

- **ingestion at depth** = p / TTFT, p the point's new prompt tokens (``new_tokens``, what ``llama-bench -p``
  counts): the speed a user sees of the new part of a prompt whose first d tokens the server holds;
- **decode speed at depth** = 1 / TPOT of each request (:class:`cardgen.outcome.RequestFigures`);
- medians with a bootstrap 95 % interval (``cardgen.analysis.stats``);
- the engine's own account where it gives one (llama.cpp's ``timings``): ingestion = ``prompt_n`` / ``prompt_ms``
  (the tokens it computed, over their time), decode = ``predicted_n`` / ``predicted_ms``, medians;
- the fill's TTFT: the whole prompt computed cold (the cache had none of it).

**Whether the server reused the d tokens** (:func:`reuse`), from the first of these it gives: each request's
``usage.prompt_tokens_details.cached_tokens``; the engine's ``timings.prompt_n`` (the tokens it computed: the
prompt less what it reused); the growth of its prefix-cache hit counter (vLLM's ``prefix_cache_hits``) over the
requests at depth, per request; else the TTFT itself, against the fill's (a request that computes p of d + p
tokens takes well under the fill's time; judged only where p is under a third of the prompt). Reused means half
of d or more on the median request. Where it was not, the server computed the whole prompt again: the
ingestion at depth is then that of d + p tokens, and the card says so.

A depth point that sent nothing is kept with the words of its stop (a depth beyond the server's context: "not
run: ...").
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.stats import describe, finite
from cardgen.analysis.timeseries import counter_growth
from cardgen.kinds.depth.program import AT_DEPTH, FILL
from cardgen.kinds.depth.schema import DepthParams
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import Distribution, KindResult

REUSED, NOT_REUSED, UNKNOWN, NO_CONTEXT = "reused", "not reused", "unknown", "no context"
FIGURE = "depth_speed.png"  # its figure's file name (figures.py draws it, section.py shows it)
REUSED_SHARE = 0.5  # of d, on the median request: the server reused the prefix
TTFT_SHARE = 0.5  # the TTFT rule: reused where the median TTFT at depth is under this share of the fill's ...
TTFT_NEW_SHARE = 1 / 3  # ... judged only where p is under this share of the prompt


class DepthPoint(Saved):
    """One depth: its requests' figures, and whether the server reused the context."""

    scenario: str
    depth: int  # d: tokens of context before the request's own
    new_tokens: int  # p: the request's own prompt tokens
    output_tokens: int  # n
    requests: int = 0  # successful requests at depth
    failed: int = 0  # failed requests at depth (the fill's failure is counted too)
    prompt_tokens: float | None = None  # median prompt tokens of the requests at depth (the server's count)
    fill_ttft_s: float | None = None  # the fill's TTFT: the whole prompt computed cold
    ttft_s: Distribution = Field(default_factory=Distribution)
    ingest_tok_s: Distribution = Field(default_factory=Distribution)  # p / TTFT
    whole_ingest_tok_s: float | None = None  # median prompt tokens / TTFT (the whole prompt): where not reused
    decode_tok_s: Distribution = Field(default_factory=Distribution)
    engine_ingest_tok_s: float | None = None  # median prompt_n / prompt_ms (the engine's timings)
    engine_decode_tok_s: float | None = None  # median predicted_n / predicted_ms
    cached_tokens: float | None = None  # median tokens the server took from its cache, per request at depth
    reuse: str = UNKNOWN  # reused | not reused | unknown | no context (depth 0)
    reuse_from: str | None = None  # what ``reuse`` was judged from, in words
    not_run: str | None = None  # why the depth sent nothing


class DepthSpeeds(KindResult):
    """Every depth point of the run, in suite order (depth order within an entry)."""

    version: int = 1
    points: list[DepthPoint] = Field(default_factory=list)


def _median(values: pd.Series | np.ndarray) -> float | None:
    x = finite(np.asarray(values, dtype=float))
    return float(np.median(x)) if len(x) else None


def _ratio(num: pd.Series, den_ms: pd.Series) -> float | None:
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = num.to_numpy(dtype=float) / (den_ms.to_numpy(dtype=float) / 1000.0)
    return _median(speed[np.isfinite(speed) & (speed > 0)])


def reuse(rows: pd.DataFrame, *, depth: int, new_tokens: int, fill_ttft_s: float | None,
          hits: tuple[float, str] | None) -> tuple[str, str | None, float | None]:
    """Whether the requests at depth (``rows``, the successful ones) had their ``depth`` tokens from the server's
    cache (module docstring: the evidence, in order), what that was judged from, and the median tokens reused per
    request where the server counted them. ``hits``: the growth of the server's prefix-cache hit counter over
    the requests, and its name."""
    if depth == 0:
        return NO_CONTEXT, None, None
    if rows.empty:
        return UNKNOWN, None, None
    cached = rows["cached_tokens"].to_numpy(dtype=float)
    if np.isfinite(cached).all():
        median = float(np.median(cached))
        return (REUSED if median >= REUSED_SHARE * depth else NOT_REUSED,
                "usage.prompt_tokens_details.cached_tokens of each request", median)
    computed = (rows["prompt_tokens"] - rows["engine_prompt_n"]).to_numpy(dtype=float)
    if np.isfinite(computed).all():
        median = float(np.median(computed))
        return (REUSED if median >= REUSED_SHARE * depth else NOT_REUSED,
                "the engine's timings.prompt_n (prompt tokens it computed) of each request", median)
    if hits is not None:
        per_request = hits[0] / len(rows)
        return (REUSED if per_request >= REUSED_SHARE * depth else NOT_REUSED,
                f"the growth of {hits[1]} over the requests at depth", per_request)
    ttft = _median(rows["ttft_s"])
    if fill_ttft_s and ttft is not None and new_tokens < TTFT_NEW_SHARE * (depth + new_tokens):
        return (REUSED if ttft < TTFT_SHARE * fill_ttft_s else NOT_REUSED,
                f"the TTFT at depth against the fill's (reused: under {TTFT_SHARE:.0%} of it)", None)
    return UNKNOWN, None, None


def not_run(run: KindRun, name: str) -> str:
    """Why point ``name`` sent nothing: its stop's words (a run, measured or modelled, lists a point beyond the
    server's context as not run, with why)."""
    said = next((s for s in run.scenarios if s.scenario == name), None)
    return said.stop_detail if said is not None and said.stop_detail else "not run: the point sent no request"


def depth_point(run: KindRun, params: DepthParams, name: str, output_tokens: int,
                rows: pd.DataFrame) -> DepthPoint:
    """One depth's figures from its request rows (``rows``: the fill's and the requests at depth)."""
    base = DepthPoint(scenario=name, depth=params.depth, new_tokens=params.new_tokens, output_tokens=output_tokens)
    if rows.empty:
        return base.model_copy(update={"not_run": not_run(run, name)})
    fill = rows[(rows["phase"] == FILL) & rows["ok"]]
    every = rows[rows["phase"] == AT_DEPTH]
    ok = every[every["ok"]]
    fill_ttft = _median(fill["ttft_s"])
    hits = None
    if len(every):
        grown = counter_growth(run.metrics, engine=run.info.server.engine, role="prefix_cache_hits",
                               start=float(every["sent_at"].min()), end=float(every["end_at"].max()))
        hits = (grown.value, grown.name) if grown is not None and math.isfinite(grown.value) else None
    verdict, source, cached = reuse(ok, depth=params.depth, new_tokens=params.new_tokens, fill_ttft_s=fill_ttft,
                                    hits=hits)
    ttft = ok["ttft_s"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ingest = params.new_tokens / ttft
        whole = ok["prompt_tokens"].to_numpy(dtype=float) / ttft
    return base.model_copy(update=dict(
        requests=len(ok), failed=int((~rows["ok"]).sum()), prompt_tokens=_median(ok["prompt_tokens"]),
        fill_ttft_s=fill_ttft, ttft_s=describe(ttft), ingest_tok_s=describe(ingest), whole_ingest_tok_s=_median(whole),
        decode_tok_s=describe(ok["decode_tok_s"].to_numpy(dtype=float)),
        engine_ingest_tok_s=_ratio(ok["engine_prompt_n"], ok["engine_prompt_ms"]),
        engine_decode_tok_s=_ratio(ok["engine_predicted_n"], ok["engine_predicted_ms"]),
        cached_tokens=cached, reuse=verdict, reuse_from=source))


def analyse(run: KindRun) -> DepthSpeeds | None:
    """One figure set per depth point (those that sent nothing, with why); None for a run without one."""
    requests = run.requests
    out = []
    for point in run.points:
        rows = requests[requests["scenario"] == point.name] if not requests.empty else requests
        out.append(depth_point(run, point.params_as(DepthParams), point.name, point.output_tokens, rows))
    return DepthSpeeds(points=out) if out else None


ANALYSIS = KindAnalysis(result=DepthSpeeds, analyse=analyse, absent=None)
