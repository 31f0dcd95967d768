"""The card's replayed traces: what was sent and how late, the SLO attainment over the whole trace, the server's
prefix-cache hit rate, and the time slices as a timeline figure and a table."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from cardgen import numbers as fmt
from cardgen.card.sections.figures import figure_path
from cardgen.card.table import TableView
from cardgen.figures.names import replay_figure_name
from cardgen.schemas.summary import ReplayResult, Summary


@dataclass(frozen=True)
class ReplaySection:
    scenario: str
    dataset: str
    speedup: str
    requests: int
    failed: int
    span: str  # the trace's span as replayed
    duration: str
    lag: str  # the send lag in words
    attainment: str
    slo: str
    hit_rate: str | None
    output: str
    figure: Markup | None
    windows: TableView | None


def _lag(r: ReplayResult) -> str:
    d = r.send_lag_s
    late = f"{r.late_sends:,} of {r.requests:,} sends left more than 10 ms late"
    return f"p50 {fmt.ms(d.p50)}, p99 {fmt.ms(d.p99)}, largest {fmt.ms(d.max)}; {late}"


def window_table(r: ReplayResult) -> TableView | None:
    if not r.windows:
        return None
    rows = [[f"{w.start_s:g}–{w.end_s:g}", str(w.sent), fmt.sig(w.arrival_rps), fmt.sig(w.output_tok_s),
             fmt.latency(w.ttft_p50_s), fmt.latency(w.ttft_p99_s), fmt.pct(w.slo_attainment), fmt.pct(w.kv_usage_max),
             fmt.sig(w.waiting_max), fmt.ms(w.send_lag_max_s)] for w in r.windows]
    return TableView(["Window (s)", "Sent", "Arrivals (req/s)", "Output tok/s", "TTFT p50", "TTFT p99", "Met the SLO",
                      "KV usage (max)", "Waiting (max)", "Send lag (max)"], rows)


def replay_sections(s: Summary) -> list[ReplaySection]:
    return [ReplaySection(
        scenario=r.scenario, dataset=r.dataset, speedup=f"{r.speedup:g}", requests=r.requests, failed=r.failed,
        span=fmt.secs(r.trace_span_s), duration=fmt.secs(r.duration_s), lag=_lag(r),
        attainment=fmt.pct(r.slo_attainment),
        slo=f"TTFT ≤ {fmt.latency(r.slo_ttft_s)} and TPOT ≤ {fmt.latency(r.slo_tpot_s)}",
        hit_rate=fmt.pct(r.prefix_cache_hit_rate) if r.prefix_cache_hit_rate is not None else None,
        output=fmt.tok_s(r.output_tok_s), figure=figure_path(s, replay_figure_name(r.scenario)),
        windows=window_table(r)) for r in s.replays if r.requests]
