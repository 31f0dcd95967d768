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


@dataclass(frozen=True)
class _Chunks:
    """Each request's chunk times as every window reads them (computed once for all of a run's windows): how many,
    the first and the last, and for a request of two or more whether they are in order and its gaps' sum, each as
    :func:`cardgen.outcome.chunk_gaps_s` ``(times).min()`` and ``.sum()`` give it."""

    times: list[np.ndarray]
    sizes: np.ndarray  # int: chunks
    first: np.ndarray  # NaN: none
    last: np.ndarray
    in_order: np.ndarray  # bool: every gap >= 0 (False below two chunks)
    gap_sum: np.ndarray  # NaN below two chunks

    @classmethod
    def of(cls, requests: pd.DataFrame) -> _Chunks:
        times = [np.asarray(t, dtype=float) for t in requests["chunk_times"].to_numpy()]
        sizes = np.fromiter(map(len, times), dtype=np.int64, count=len(times))
        first, last = np.full(len(times), np.nan), np.full(len(times), np.nan)
        in_order, gap_sum = np.zeros(len(times), dtype=bool), np.full(len(times), np.nan)
        some = np.flatnonzero(sizes > 0)
        first[some] = [times[i][0] for i in some]
        last[some] = [times[i][-1] for i in some]
        # the requests of one length a block of them at a time, as rows of one array: a row's gaps, their minimum
        # and their sum as numpy reduces a row (pairwise, as it sums the row's own array: the same bits)
        several = sizes > 1
        for size in np.unique(sizes[several]).tolist():
            rows = np.flatnonzero(sizes == size)
            step = max(1, (1 << 20) // size)
            for at in range(0, len(rows), step):
                part = rows[at:at + step]
                gaps = np.diff(np.stack([times[i] for i in part]), axis=1)
                in_order[part] = gaps.min(axis=1) >= 0
                gap_sum[part] = gaps.sum(axis=1)
        return cls(times, sizes, first, last, in_order, gap_sum)


def _client_side(requests: pd.DataFrame, t0: float, t1: float, chunks: _Chunks | None = None) -> _ClientSide:
    """What the client saw between ``t0`` and ``t1`` (``chunks``: the requests' :class:`_Chunks`, made here unless
    given)."""
    def inside(x: np.ndarray) -> np.ndarray:
        return (x > t0) & (x <= t1)

    if requests.empty:
        empty = np.empty(0)
        return _ClientSide(empty, empty, GapPool([]), 0.0, 0.0, 0, 0, False, 0, 0, 0)
    c = chunks if chunks is not None else _Chunks.of(requests)
    sends = requests["sent_at"].to_numpy(dtype=float)
    ends = requests["end_at"].to_numpy(dtype=float)
    ends = np.where(np.isfinite(ends), ends, sends)
    ok_mask = requests["ok"].to_numpy(dtype=bool)
    first = requests["first_token_at"].to_numpy(dtype=float)
    ended = inside(ends)
    wholly = (sends > t0) & (ends <= t1)
    touching = (sends <= t1) & (ends > t0)
    started_ok = inside(first[ok_mask])
    # only the successful requests touching the window can have a chunk inside it (their columns, not a frame's
    # copy), in order; those with two chunks or more all inside it and in order are the common case (taken whole,
    # by their chunk times), the others are looked at chunk by chunk
    near = np.flatnonzero(ok_mask & touching)
    outs = requests["output_tokens"].to_numpy(dtype=float)[near]
    n_out = np.where(np.isfinite(outs), outs, 0).astype(np.int64)
    sizes = c.sizes[near]
    whole = (sizes > 1) & (c.first[near] > t0) & (c.last[near] <= t1) & c.in_order[near]
    span = np.where(whole, c.gap_sum[near], 0.0)  # what each adds to the gaps' span, in order
    output = int(n_out[whole].sum())
    gap_tokens = float(np.maximum(n_out[whole] - 1, 0).sum())
    partial = False
    kept: dict[int, np.ndarray] = {}  # a request looked at chunk by chunk -> the gaps it keeps
    for at in np.flatnonzero(~whole & (sizes > 0)).tolist():
        times, n = c.times[near[at]], int(n_out[at])
        in_chunks = inside(times)
        if in_chunks.all():
            output += n
        elif in_chunks.any():
            output += int(in_chunks.sum())
            partial = True
        if len(times) > 1:
            later = in_chunks[1:]
            if later.any():
                kept[at] = np.diff(times)[later]
                span[at] = float(kept[at].sum())
                gap_tokens += max(n - 1, 0) if later.all() else float(later.sum())
    # every gap inside the window, in order: a request's taken whole, the others' kept (a long run's whole window
    # holds tens of millions: pooled, never one array of them)
    sources: list[np.ndarray] = []
    diffs: list[bool] = []
    for at, is_whole in enumerate(whole.tolist()):
        if is_whole:
            sources.append(c.times[near[at]])
            diffs.append(True)
        elif at in kept:
            sources.append(kept[at])
            diffs.append(False)
    # the span added up request by request, in order, as one float would be
    gap_span = float(np.add.accumulate(np.concatenate([[0.0], span]))[-1])

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
            requests: pd.DataFrame, names: dict[str, str], chunks: _Chunks) -> CrossCheckWindow:
    (t0, s0), (t1, s1) = before, after
    side = _client_side(requests, t0, t1, chunks)
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
                  scenarios: Sequence[ScenarioSummary], names: dict[str, str],
                  chunks: _Chunks | None = None) -> dict[str, CrossCheckWindow]:
    """Each point's window, from the last scrape before its first send to the first after its last end, where the
    scrapes bracket it."""
    times = np.array([t for t, _ in scrapes])
    chunks = chunks if chunks is not None else _Chunks.of(requests)
    out = {}
    for s in scenarios:
        if s.started_unix is None or s.ended_unix is None:
            continue
        i0 = int(np.searchsorted(times, s.started_unix, side="right")) - 1
        i1 = int(np.searchsorted(times, s.ended_unix, side="left"))
        if i0 < 0 or i1 >= len(scrapes) or i1 <= i0:
            continue
        out[s.scenario] = _window(s.scenario, scrapes[i0], scrapes[i1], requests, names, chunks)
    return out


def every_window(metrics: Sequence[MetricSample], requests: pd.DataFrame, scenarios: Sequence[ScenarioSummary],
                 *, engine: str | None) -> dict[str, CrossCheckWindow]:
    """The server against the client over every point's window (any kind) and the run's (``"run"``); empty when
    the scrapes cannot bracket anything."""
    scrapes = _scrapes(metrics)
    names = _present(scrapes[-1][1], engine) if scrapes else {}
    if len(scrapes) < 2 or not names:
        return {}
    chunks = _Chunks.of(requests)  # read once for every window
    return {"run": _window("run", scrapes[0], scrapes[-1], requests, names, chunks),
            **point_windows(scrapes, requests, scenarios, names, chunks)}
