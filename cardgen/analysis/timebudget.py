"""Where the time goes (pure): each point's mean time to first token, as the client measured it, split into the
parts the engine accounts for, and the engine's decode time per token beside the client's.

Parts of the client's mean TTFT (means over the point's successful requests, warm-ups left out; shares of the
client's mean TTFT):

- **queue**: waiting before the engine scheduled the request: the engine's per-request account (vLLM's
  ``metrics.queue_time_ms``), else its queue histogram over the point's window;
- **prompt compute**: the engine's time from scheduling the request to its first token (llama.cpp's
  ``timings.prompt_ms``, vLLM's ``metrics.time_to_first_token_ms``), else its prefill histogram;
- **network and client**: the client's TTFT less the engine's own (vLLM's ``time_to_first_token_seconds``
  histogram, from the API server receiving the request), over the same requests (the point's window: each client
  TTFT taken by when the server records it, :mod:`cardgen.analysis.crosscheck`);
- **other server time**: what is left: tokenising, cache management, HTTP inside the server;
- **outside the engine's account**: where the engine gives no TTFT of its own (llama.cpp), the client's TTFT less
  queue and prompt compute: the server's other time, the network and the client, not told apart.

With the engine's per-request account the parts add up to the client's mean TTFT over the point's requests; with
histograms alone every part is a mean over the point's window (the client's TTFT too). The run's parts are the
points' means weighted by their requests.

Per token: the engine's decode time (first to last token, ``predicted_ms`` / ``generation_time_ms``, else its
decode histogram) per token after the first, beside the client's ITL (Σ (E2E - TTFT) / Σ (tokens - 1)) and mean TPOT.
The engine's ingestion speed is the prompt tokens it computed (cached ones left out) over its prompt compute: from
its account of each request, else over the point's window, the prompt tokens the server counted (its counter, else
the client's usage) over the rise of its prefill histogram's sum (vLLM's ``request_prefill_time_seconds``).

A part other than prompt compute that takes most of the TTFT is named, with the engine setting that usually
causes it where the engine's adapter knows one; unless the point's kind makes that part large on purpose
(:attr:`cardgen.kinds.Kind.by_design`: a load that fills the server to find where it queues), which is said as such
(``by_design``) and is no finding. Over the run, a part is by design when it takes most of the TTFT only through
such points: over the other points' requests it does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from cardgen.engines import time_hints
from cardgen.kinds import kind_of
from cardgen.schemas.summary import (
    CrossCheckWindow,
    LatencyCheck,
    ScenarioSummary,
    TimeBudget,
    TimeBudgets,
    TimePart,
)

PARTS = ("queue", "prompt", "other_server", "network_client", "outside_engine")
DOMINANT_SHARE = 0.5  # a part other than prompt compute above this share of the TTFT is named
NEGLIGIBLE_S = 1e-9  # a part this small is a rounding difference of two means: 0
PER_REQUEST = {"timings": "llama.cpp's per-request timings", "metrics": "vLLM's per-request metrics"}


def _mean(x: pd.Series) -> float | None:
    values = x.to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def _all_finite(x: pd.Series) -> bool:
    values = x.to_numpy(dtype=float)
    return bool(len(values)) and bool(np.isfinite(values).all())


def _server_mean(window: CrossCheckWindow | None, metric: str) -> float | None:
    if window is None:
        return None
    check = next((c for c in window.latencies if c.metric == metric and c.server_metric), None)
    return check.server_mean_s if check is not None and check.server_count else None


def _per_request_source(rows: pd.DataFrame) -> str | None:
    sources = {s for s in rows["engine_source"] if s} if "engine_source" in rows else set()
    return PER_REQUEST.get(next(iter(sources)), next(iter(sources))) if len(sources) == 1 else None


def _check(window: CrossCheckWindow | None, metric: str) -> LatencyCheck | None:
    return next((c for c in window.latencies if c.metric == metric and c.server_metric and c.server_count), None) \
        if window is not None else None


def budget(scope: str, rows: pd.DataFrame, window: CrossCheckWindow | None, *, engine: str | None,
           by_design: frozenset[str] = frozenset()) -> TimeBudget | None:
    """The time budget of ``rows`` (one point's successful requests), with the server's histograms over ``window``
    (the point's scrapes) where it has them; None when the engine says nothing of these requests. ``by_design``:
    the parts the point's kind makes large on purpose, never named as a finding.

    With the engine's own account of each request, queue and prompt compute are its means over ``rows``, and the rest
    of the client's TTFT is split by the window's TTFT histogram against the client's TTFT of the same requests
    (network and client = their difference; other server time = the rest); without that histogram, the rest stays
    "outside the engine's account". With histograms alone, every part is a mean over the window, the client's TTFT
    the window's too (the same requests as the server's)."""
    if rows.empty:
        return None
    per_request = _per_request_source(rows)
    ttft = _check(window, "ttft")
    parts: list[TimePart] = []
    if per_request and _all_finite(rows["engine_prompt_ms"]):
        client = _mean(rows["ttft_s"])
        queue = float(rows["engine_queue_ms"].mean()) / 1000 if _all_finite(rows["engine_queue_ms"]) else None
        prompt = float(rows["engine_prompt_ms"].mean()) / 1000
        if client is None:
            return None
        if queue is not None:
            parts.append(_part("queue", queue, client, per_request))
        parts.append(_part("prompt", prompt, client, per_request))
        rest = client - (queue or 0.0) - prompt
        if ttft is not None and ttft.diff_mean_s is not None:
            network = ttft.diff_mean_s
            said = "the server's TTFT histogram against the client's for the same requests"
            parts.append(_part("other_server", rest - network, client, said))
            parts.append(_part("network_client", network, client, said))
            # the engine's TTFT of these requests: the window's histogram may also hold a request of the point
            # before (a short point's window catches one in flight), so it gives the network's share (a
            # difference over the same requests), not the level
            engine_ttft: float | None = client - network
        else:
            parts.append(_part("outside_engine", rest, client,
                               "the client's TTFT less queue and prompt compute: the engine says nothing of the rest"))
            engine_ttft = ttft.server_mean_s if ttft is not None else None
    else:
        prefill, queue_check = _check(window, "prefill"), _check(window, "queue")
        if prefill is None or ttft is None or ttft.client_mean_s is None or ttft.server_mean_s is None:
            return None
        client, engine_ttft = ttft.client_mean_s, ttft.server_mean_s
        queue = queue_check.server_mean_s if queue_check is not None else None
        source = "the server's histograms over the point's window"
        if queue is not None:
            parts.append(_part("queue", queue, client, source))
        parts.append(_part("prompt", prefill.server_mean_s or 0.0, client, source))
        parts.append(_part("other_server", engine_ttft - (queue or 0.0) - (prefill.server_mean_s or 0.0), client,
                           source))
        parts.append(_part("network_client", client - engine_ttft, client, source))
    out = TimeBudget(scope=scope, requests=len(rows), client_ttft_s=client, engine_ttft_s=engine_ttft, parts=parts)
    _per_token(out, rows, window, per_request)
    _dominant(out, engine, by_design)
    return out


def _part(name: str, seconds: float, client: float, source: str) -> TimePart:
    seconds = 0.0 if abs(seconds) < NEGLIGIBLE_S else seconds  # a difference of equal means, not a part
    return TimePart(part=name, seconds=seconds, share=seconds / client if client else None, source=source)


def run_budget(points: Sequence[TimeBudget], *, engine: str | None = None,
               by_design: Mapping[str, frozenset[str]] | None = None) -> TimeBudget | None:
    """The run's budget: each part's mean over every request of the points (each point weighted by its requests).
    ``by_design``: each point's (by scope) parts that its kind makes large on purpose."""
    if not points:
        return None
    n = sum(b.requests for b in points)

    def mean(values: list[tuple[float | None, int]]) -> float | None:
        known = [(v, k) for v, k in values if v is not None]
        if not values or len(known) < len(values):
            return None
        return sum(v * k for v, k in known) / n

    client = mean([(b.client_ttft_s, b.requests) for b in points])
    names = [name for name in PARTS if all(b.part(name) is not None for b in points)]
    parts = []
    for name in names:
        found = [(p, b.requests) for b in points if (p := b.part(name)) is not None]  # every point: see names
        seconds = mean([(p.seconds, k) for p, k in found])
        sources = sorted({p.source for p, _ in found})
        if seconds is not None and client:
            parts.append(_part(name, seconds, client, "; ".join(sources)))
    decoding = [(b.engine_decode_per_token_s, b.requests) for b in points if b.engine_decode_per_token_s is not None]
    out = TimeBudget(scope="run", requests=n, client_ttft_s=client, parts=parts,
                     engine_ttft_s=mean([(b.engine_ttft_s, b.requests) for b in points]),
                     engine_decode_per_token_s=sum(v * k for v, k in decoding) / sum(k for _, k in decoding)
                     if decoding else None)
    for field in ("client_itl_s", "client_tpot_s"):
        having = [b for b in points if getattr(b, field) is not None]
        if having:
            setattr(out, field, sum(getattr(b, field) * b.requests for b in having) / sum(b.requests for b in having))
    _dominant(out, engine, _run_by_design(out, points, by_design or {}))
    return out


def _run_by_design(run: TimeBudget, points: Sequence[TimeBudget],
                   by_design: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The parts of the run's TTFT that take most of it only through points whose kinds make them large on
    purpose: over the other points' requests they do not."""
    out = set()
    for part in run.parts:
        others = [b for b in points if part.part not in by_design.get(b.scope, frozenset())]
        if len(others) == len(points):
            continue  # no point makes it large on purpose
        client = sum((b.client_ttft_s or 0.0) * b.requests for b in others)
        seconds = sum((p.seconds or 0.0) * b.requests for b in others if (p := b.part(part.part)) is not None)
        if not client or seconds / client <= DOMINANT_SHARE:
            out.add(part.part)
    return frozenset(out)


def _per_token(out: TimeBudget, rows: pd.DataFrame, window: CrossCheckWindow | None, per_request: str | None) -> None:
    """The engine's decode time per token beside the client's, and the engine's ingestion speed."""
    steps = (rows["output_tokens"] - 1).clip(lower=0)
    gen = (rows["e2e_s"] - rows["ttft_s"]).to_numpy(dtype=float)
    ok = np.isfinite(gen) & (steps.to_numpy(dtype=float) > 0)
    if ok.any():
        out.client_itl_s = float(gen[ok].sum() / steps.to_numpy(dtype=float)[ok].sum())
    out.client_tpot_s = _mean(rows["tpot_s"])
    if per_request and _all_finite(rows["engine_predicted_ms"]) and steps.sum() > 0:
        out.engine_decode_per_token_s = float(rows["engine_predicted_ms"].sum() / 1000 / steps.sum())
    elif (decode_s := _server_mean(window, "decode")) is not None and steps.mean() > 0:
        out.engine_decode_per_token_s = decode_s / float(steps.mean())
    if per_request and _all_finite(rows["engine_prompt_ms"]):
        computed = rows["engine_prompt_n"].where(np.isfinite(rows["engine_prompt_n"]),
                                                 rows["prompt_tokens"] - rows["cached_tokens"].fillna(0))
        seconds = float(rows["engine_prompt_ms"].sum()) / 1000
        if seconds > 0 and np.isfinite(computed).all():
            out.engine_prompt_tok_s = float(computed.sum()) / seconds
            out.engine_prompt_method = (f"prompt tokens it computed / its prompt compute, over the {len(rows)} "
                                        f"requests of {out.scope}")
    if out.engine_prompt_tok_s is None:
        _window_ingestion(out, rows, window)


def _window_ingestion(out: TimeBudget, rows: pd.DataFrame, window: CrossCheckWindow | None) -> None:
    """The engine's ingestion speed over the point's window, where it gives its prefill time only as a histogram:
    the prompt tokens counted over the window (the server's counter, else the client's usage of the requests whose
    first token came inside it; less the cached tokens the responses reported) over the rise of the prefill
    histogram's sum (its mean times its count) over the same window."""
    prefill = _check(window, "prefill")
    if window is None or prefill is None or prefill.server_mean_s is None or not prefill.server_count:
        return
    seconds = prefill.server_mean_s * prefill.server_count
    prompt = next((t for t in window.tokens if t.tokens == "prompt"), None)
    if prompt is None or seconds <= 0:
        return
    if prompt.server_tokens is not None:
        tokens, counted = prompt.server_tokens, f"counted by {prompt.server_counter}"
    else:
        tokens, counted = float(prompt.client_tokens), "of the responses' usage"
    cached = rows["cached_tokens"].to_numpy(dtype=float) if "cached_tokens" in rows else np.empty(0)
    cached_sum = float(cached[np.isfinite(cached)].sum())
    less = f", less the {cached_sum:,.0f} cached tokens the responses reported" if cached_sum > 0 else ""
    if tokens - cached_sum <= 0:
        return
    out.engine_prompt_tok_s = (tokens - cached_sum) / seconds
    out.engine_prompt_method = (f"prompt tokens {counted} over the window of {out.scope}{less} / the rise of "
                                f"{prefill.server_metric}'s sum over it, {prefill.server_count:g} requests")


def _dominant(out: TimeBudget, engine: str | None, by_design: frozenset[str] = frozenset()) -> None:
    """The part other than prompt compute that takes most of the TTFT: a finding (``dominant``, with the setting
    that usually causes it), or what the point's kind does on purpose (``by_design``)."""
    others = [p for p in out.parts if p.part != "prompt" and p.share is not None]
    top = max(others, key=lambda p: p.share or 0.0, default=None)
    if top is None or (top.share or 0.0) <= DOMINANT_SHARE:
        return
    if top.part in by_design:
        out.by_design = top.part
    else:
        out.dominant = top.part
        out.hint = time_hints(engine).get(top.part)


def time_budgets(requests: pd.DataFrame, windows: Mapping[str, CrossCheckWindow],
                 scenarios: Sequence[ScenarioSummary], *, engine: str | None) -> TimeBudgets:
    """The run's and every point's time budget, where the engine says enough (:func:`budget`); ``windows``: the
    server's histograms over each point's window and the run's (:func:`cardgen.analysis.crosscheck.every_window`)."""
    if requests.empty:
        return TimeBudgets(reason="no request")
    ok = requests[requests["ok"] & ~requests["warmup"]]
    by_design = {s.scenario: kind_of(s).designed(s) for s in scenarios}
    points = []
    for s in scenarios:
        rows = ok[ok["scenario"] == s.scenario]
        b = budget(s.scenario, rows, windows.get(s.scenario), engine=engine, by_design=by_design[s.scenario])
        if b is not None:
            points.append(b)
    run = run_budget(points, engine=engine, by_design=by_design)
    if run is None and not points:
        return TimeBudgets(reason="queue, prompt compute, other server time and network could not be told apart: "
                                  "the engine gives no account of its own time (no per-request timings in its "
                                  "responses, no queue, prefill or TTFT histogram in /metrics)")
    sources = sorted({p.source for b in [*points, *([run] if run else [])] for p in b.parts if p.source})
    return TimeBudgets(available=True, sources=sources, run=run, points=points)
