"""Server vs client: the server's own latency histograms and token counters next to what the client measured
for the same requests.

Over a window between two scrapes of ``/metrics`` (the whole run: first to last scrape; a closed-loop point: the
last scrape before its first send to the first scrape after its last end), the server's side is the increase of
each histogram (mean = sum increase / count increase; p50 and p90 interpolated inside the buckets, as
Prometheus' ``histogram_quantile`` does) and of its token counters. The client's side comes from its records
over the same window (warm-ups included: the server served them too): exact means and percentiles of TTFT and
E2E, and for ITL the mean per token, Σ gaps / Σ (output tokens - 1), with percentiles over the gaps between text
chunks. The difference client - server is what the network and the client add.

Each client figure is selected by when the server records it, so both sides cover the same requests even when a
scrape falls in the middle of one: TTFT and prompt tokens by the first token's arrival, E2E by the end of the
stream, ITL by each gap's later chunk; output tokens are ``usage`` for a request whose chunks all came inside the
window, else the number of its chunks inside it (then ``approximate``: one token per chunk).

Histogram and counter names come from the engine's adapter only (:func:`cardgen.engines.metric_candidates`: its
names, then those older versions used); an engine whose adapter names none has no comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cardgen.analysis.pooled import GapPool
from cardgen.analysis.stats import finite
from cardgen.engines import counter, histogram, histogram_delta, histogram_quantile, metric_candidates
from cardgen.kinds import kind_of
from cardgen.outcome import chunk_gaps_s
from cardgen.rundir import SERVER_METRICS_JSONL
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import (
    CrossCheckWindow,
    LatencyCheck,
    ScenarioSummary,
    ServerVsClient,
    TokenCheck,
)

LATENCIES = ("ttft", "itl", "e2e", "queue", "prefill", "decode")  # the last three: the server's alone
SERVER_ONLY = ("queue", "prefill", "decode")  # parts of a request the client cannot see
TOKENS = (("prompt", "prompt_tokens"), ("output", "generation_tokens"))


def _scrapes(metrics: Sequence[MetricSample]) -> list[tuple[float, MetricSample]]:
    ok = [((m.t + m.t_end) / 2 if m.t_end is not None else m.t, m) for m in metrics if m.error is None and m.samples]
    return sorted(ok, key=lambda x: x[0])


def _present(scrape: MetricSample, engine: str | None) -> dict[str, str]:
    """Role -> the name this server publishes, for every latency histogram and token counter it has."""
    found: dict[str, str] = {}
    for role in LATENCIES:
        name = next((n for n in metric_candidates(engine, role) if histogram(scrape, n) is not None), None)
        if name:
            found[role] = name
    for _, role in TOKENS:
        name = next((n for n in metric_candidates(engine, role) if counter(scrape, n) is not None), None)
        if name:
            found[role] = name
    return found


def bucket_bounds(hist: dict[str, Any], q: float) -> list[float | None] | None:
    """``[lower, upper]`` bound of the bucket holding quantile ``q`` (upper None for the ``+Inf`` bucket): how
    precise an interpolated quantile can be."""
    buckets = hist.get("buckets") or []
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower = 0.0
    for le, count in buckets:
        if count >= rank:
            return [lower, None if np.isinf(le) else float(le)]
        lower = float(le)
    return None


def _f(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def _diff(client: float | None, server: float | None) -> float | None:
    return client - server if client is not None and server is not None else None


def _stats(x: np.ndarray) -> tuple[float | None, float | None, float | None]:
    if len(x) == 0:
        return None, None, None
    p50, p90 = np.percentile(x, [50, 90])
    return float(x.mean()), float(p50), float(p90)


@dataclass(frozen=True)
class _ClientSide:
    """What the client saw inside one window, each figure selected by when the server records it."""

    ttft: np.ndarray  # successful requests whose first token came inside the window
    e2e: np.ndarray  # successful requests that ended inside the window
    gaps: GapPool  # gaps between text chunks whose later chunk came inside the window
    gap_tokens: float  # the tokens those gaps stand for (output tokens - 1 of a request wholly inside)
    gap_span_s: float  # the time those gaps cover
    prompt_tokens: int  # usage of the requests whose first token came inside the window (prefill done)
    output_tokens: int  # usage of the requests wholly inside; chunks inside the window of the others
    approximate_tokens: bool  # some requests were only partly inside: their output tokens are counted as chunks
    requests: int  # successful requests that ended inside the window
    failed: int
    straddling: int


def _client_side(requests: pd.DataFrame, t0: float, t1: float) -> _ClientSide:
    def inside(x: np.ndarray) -> np.ndarray:
        return (x > t0) & (x <= t1)

    if requests.empty:
        empty = np.empty(0)
        return _ClientSide(empty, empty, GapPool([]), 0.0, 0.0, 0, 0, False, 0, 0, 0)
    sends = requests["sent_at"].to_numpy(dtype=float)
    ends = requests["end_at"].to_numpy(dtype=float)
    ends = np.where(np.isfinite(ends), ends, sends)
    ok_mask = requests["ok"].to_numpy(dtype=bool)
    first = requests["first_token_at"].to_numpy(dtype=float)
    ended = inside(ends)
    wholly = (sends > t0) & (ends <= t1)
    touching = (sends <= t1) & (ends > t0)
    started_ok = inside(first[ok_mask])
    gap_tokens, gap_span, output, partial = 0.0, 0.0, 0, False
    near = ok_mask & touching  # only these can have a chunk inside the window (their columns, not a frame's copy)
    chunks = [np.asarray(times, dtype=float) for times in requests["chunk_times"].to_numpy()[near]]
    # every gap inside the window, in order: a request wholly inside by its chunk times, the others' kept gaps
    # (a long run's whole window holds tens of millions: pooled, never one array of them)
    sources: list[np.ndarray] = []
    diffs: list[bool] = []
    for times, out in zip(chunks, requests["output_tokens"].to_numpy(dtype=float)[near], strict=True):
        n_out = int(out) if np.isfinite(out) else 0
        if len(times) == 0:
            continue
        if len(times) > 1 and times[0] > t0 and times[-1] <= t1:  # the common case, at a fifth of the cost:
            step = chunk_gaps_s(times)
            if step.min() >= 0:  # in order, so every chunk is inside: what the general way below finds
                output += n_out
                sources.append(times)
                diffs.append(True)
                gap_span += float(step.sum())
                gap_tokens += max(n_out - 1, 0)
                continue
        in_chunks = inside(times)
        if in_chunks.all():
            output += n_out
        elif in_chunks.any():
            output += int(in_chunks.sum())
            partial = True
        if len(times) > 1:
            step = np.diff(times)
            later = in_chunks[1:]
            if later.any():
                kept = step[later]
                sources.append(kept)
                diffs.append(False)
                gap_span += float(kept.sum())
                gap_tokens += max(n_out - 1, 0) if later.all() else float(later.sum())
    def of_ok(column: str) -> np.ndarray:  # the successful requests' values (no copy of the frame)
        values: np.ndarray = requests[column].to_numpy(dtype=float)[ok_mask]
        return values

    prompts = of_ok("prompt_tokens")[started_ok]
    return _ClientSide(
        ttft=finite(of_ok("ttft_s")[started_ok]),
        e2e=finite(of_ok("e2e_s")[ended[ok_mask]]),
        gaps=GapPool(sources, diffs), gap_tokens=gap_tokens, gap_span_s=gap_span,
        prompt_tokens=int(np.nansum(prompts)), output_tokens=output, approximate_tokens=partial,
        requests=int((ended & ok_mask).sum()), failed=int((ended & ~ok_mask).sum()),
        straddling=int((touching & ~wholly).sum()))


def _client(role: str, c: _ClientSide) -> tuple[int, float | None, float | None, float | None, str | None]:
    """Count, mean, p50, p90 of ``role`` as the client saw it (and a note)."""
    if role in ("ttft", "e2e"):
        x = c.ttft if role == "ttft" else c.e2e
        return (len(x), *_stats(x), None)
    if role == "itl":
        if c.gap_tokens <= 0 or c.gaps.n == 0:
            return int(c.gap_tokens), None, None, None, None
        p50, p90 = c.gaps.percentiles([50, 90])
        note = None
        if c.gaps.n != int(c.gap_tokens):
            note = (f"p50 and p90 over {c.gaps.n:,} gaps between text chunks for {int(c.gap_tokens):,} tokens: "
                    "some chunks carried several tokens")
        return int(c.gap_tokens), c.gap_span_s / c.gap_tokens, float(p50), float(p90), note
    return 0, None, None, None, None


def _window(scope: str, before: tuple[float, MetricSample], after: tuple[float, MetricSample],
            requests: pd.DataFrame, names: dict[str, str]) -> CrossCheckWindow:
    (t0, s0), (t1, s1) = before, after
    side = _client_side(requests, t0, t1)
    latencies = []
    for role in LATENCIES:
        name = names.get(role)
        hist = histogram_delta(s0, s1, name) if name else None
        count, mean, p50, p90, note = _client(role, side)
        s_mean = _f(hist["mean"]) if hist else None
        s_p50 = _f(histogram_quantile(hist, 0.5)) if hist else None
        s_p90 = _f(histogram_quantile(hist, 0.9)) if hist else None
        latencies.append(LatencyCheck(
            metric=role, server_metric=name, server_count=_f(hist["count"]) if hist else None,
            server_mean_s=s_mean, server_p50_s=s_p50, server_p90_s=s_p90,
            server_p50_bucket_s=bucket_bounds(hist, 0.5) if hist else None,
            server_p90_bucket_s=bucket_bounds(hist, 0.9) if hist else None,
            client_count=count, client_mean_s=mean, client_p50_s=p50, client_p90_s=p90,
            diff_mean_s=_diff(mean, s_mean), diff_p50_s=_diff(p50, s_p50), diff_p90_s=_diff(p90, s_p90), note=note))
    tokens = []
    for label, role in TOKENS:
        client = side.prompt_tokens if label == "prompt" else side.output_tokens
        name = names.get(role)
        server = None
        if name:
            end, start = counter(s1, name), counter(s0, name)
            server = end - (start or 0.0) if end is not None else None  # a counter not yet exposed is 0
        tokens.append(TokenCheck(tokens=label, client_tokens=client, server_counter=name, server_tokens=server,
                                 diff=client - server if server is not None else None,
                                 approximate=label == "output" and side.approximate_tokens))
    return CrossCheckWindow(scope=scope, start_unix=t0, end_unix=t1, requests=side.requests,
                            requests_failed=side.failed, straddling=side.straddling, latencies=latencies,
                            tokens=tokens)


def server_vs_client(metrics: Sequence[MetricSample], requests: pd.DataFrame, scenarios: Sequence[ScenarioSummary],
                     *, engine: str | None, windows: Mapping[str, CrossCheckWindow] | None = None) -> ServerVsClient:
    """The comparison for the whole run and for every closed-loop point the scrapes bracket: their windows
    among :func:`every_window`'s (``windows``, computed here unless given: a long run's are computed once)."""
    scrapes = _scrapes(metrics)
    if not scrapes:
        return ServerVsClient(reason=f"{SERVER_METRICS_JSONL} is missing or holds no successful scrape")
    names = _present(scrapes[-1][1], engine)
    if not names:
        wanted = ", ".join(n for role in ("ttft", "itl", "e2e") for n in metric_candidates(engine, role)[:1])
        if not wanted:
            return ServerVsClient(reason=f"cardgen knows no latency histogram or token counter of engine "
                                         f"'{engine or 'unknown'}'")
        return ServerVsClient(reason=f"the server's /metrics has no latency histogram ({wanted}) and no token "
                                     "counter")
    if len(scrapes) < 2:
        return ServerVsClient(reason="only one successful scrape of /metrics: no increase to compare")
    if windows is None:
        windows = every_window(metrics, requests, scenarios, engine=engine)
    points = [windows[s.scenario] for s in scenarios if kind_of(s).steady_window and s.scenario in windows]
    return ServerVsClient(available=True, run=windows["run"], points=points)


def point_windows(scrapes: list[tuple[float, MetricSample]], requests: pd.DataFrame,
                  scenarios: Sequence[ScenarioSummary], names: dict[str, str]) -> dict[str, CrossCheckWindow]:
    """Each point's window, from the last scrape before its first send to the first after its last end, where the
    scrapes bracket it."""
    times = np.array([t for t, _ in scrapes])
    out = {}
    for s in scenarios:
        if s.started_unix is None or s.ended_unix is None:
            continue
        i0 = int(np.searchsorted(times, s.started_unix, side="right")) - 1
        i1 = int(np.searchsorted(times, s.ended_unix, side="left"))
        if i0 < 0 or i1 >= len(scrapes) or i1 <= i0:
            continue
        out[s.scenario] = _window(s.scenario, scrapes[i0], scrapes[i1], requests, names)
    return out


def every_window(metrics: Sequence[MetricSample], requests: pd.DataFrame, scenarios: Sequence[ScenarioSummary],
                 *, engine: str | None) -> dict[str, CrossCheckWindow]:
    """The server against the client over every point's window (any kind) and the run's (``"run"``); empty when
    the scrapes cannot bracket anything."""
    scrapes = _scrapes(metrics)
    names = _present(scrapes[-1][1], engine) if scrapes else {}
    if len(scrapes) < 2 or not names:
        return {}
    return {"run": _window("run", scrapes[0], scrapes[-1], requests, names),
            **point_windows(scrapes, requests, scenarios, names)}
