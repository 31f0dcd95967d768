"""Server against client: the server's own histograms and counters next to what the client measured."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.summary import CrossCheckWindow, LatencyCheck, ServerVsClient

_LATENCY_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E latency", "queue": "Queue time (server only)",
                   "prefill": "Prefill time (server only)", "decode": "Decode time (server only)"}


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
    client = c.metric not in ("queue", "prefill", "decode")
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


def server_vs_client_tables(v: ServerVsClient) -> tuple[TableView | None, TableView | None, TableView | None, list[str]]:
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
