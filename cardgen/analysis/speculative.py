"""Speculative decoding as the server counts it (pure): acceptance rate, mean accepted tokens and per-position
acceptance, over the run and over each point, read through the engine's adapter (:mod:`cardgen.engines`).

- vLLM (counters): over a window between two scrapes, acceptance rate = Δ accepted draft tokens / Δ draft tokens;
  mean accepted tokens = Δ accepted / Δ drafts (a draft is one sequence's verify step); mean acceptance length =
  1 + that (vLLM's "acceptance length", tokens a sequence gains per step); acceptance at position i = Δ accepted
  at i / Δ drafts (``vllm bench serve``'s per-position acceptance). Exact: the server counts every draft.
- SGLang (gauges, each the server's average over its last stats interval): the mean over the window's scrapes of
  ``spec_accept_rate`` and of ``spec_accept_length`` (mean accepted = accept length - 1); no per-position figure.

The run's window is its first to its last scrape. A point's is the last scrape before its first send to the first
after its last end; when another point's requests fall inside it (points run back to back, with no scrape between
them), it is the first scrape after its first send to the last before its last end instead (the point's middle:
only its own requests run then), and the point has no figure of its own (None) when fewer than two scrapes fall
inside it: its counters would mix two workloads.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from cardgen.engines import counter, labelled_counter, metric_names
from cardgen.schemas.records import MetricSample
from cardgen.schemas.summary import ScenarioSummary, SpeculativeDecoding

COUNTERS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")


def _ok(metrics: Sequence[MetricSample]) -> list[MetricSample]:
    return sorted((m for m in metrics if m.error is None), key=lambda m: m.t)


def _counted(before: MetricSample, after: MetricSample, names: dict[str, str]) -> SpeculativeDecoding | None:
    values = []
    for role in COUNTERS:
        end, start = counter(after, names[role]), counter(before, names[role])
        if end is None:
            return None
        values.append(end - (start or 0.0))  # a counter not yet exposed is 0
    drafts, draft_tokens, accepted = values
    if drafts <= 0 or draft_tokens <= 0:
        return None
    start_pos = labelled_counter(before, names.get("spec_accepted_per_pos", ""), "position")
    end_pos = labelled_counter(after, names.get("spec_accepted_per_pos", ""), "position")
    positions = sorted(end_pos, key=lambda p: int(p) if p.isdigit() else 0)
    mean = accepted / drafts
    return SpeculativeDecoding(
        acceptance_rate=accepted / draft_tokens, mean_accepted_tokens=mean, mean_acceptance_length=1.0 + mean,
        per_position=[(end_pos[p] - start_pos.get(p, 0.0)) / drafts for p in positions], drafts=drafts,
        draft_tokens=draft_tokens, accepted_tokens=accepted, method="counters",
        source=", ".join(names[r] for r in (*COUNTERS, "spec_accepted_per_pos") if names.get(r)),
        start_unix=before.t, end_unix=after.t)


def _gauged(scrapes: Sequence[MetricSample], names: dict[str, str]) -> SpeculativeDecoding | None:
    length_name, rate_name = names.get("spec_accept_length", ""), names.get("spec_accept_rate", "")
    lengths = [v for v in (counter(m, length_name) for m in scrapes) if v is not None and v > 0]
    rates = [v for v in (counter(m, rate_name) for m in scrapes) if v is not None and v > 0]
    if not lengths and not rates:
        return None
    length = sum(lengths) / len(lengths) if lengths else None
    return SpeculativeDecoding(
        acceptance_rate=sum(rates) / len(rates) if rates else None,
        mean_accepted_tokens=length - 1.0 if length is not None else None, mean_acceptance_length=length,
        method="gauges", source=" and ".join(n for n in (length_name, rate_name) if n) + " (mean over scrapes)",
        start_unix=scrapes[0].t, end_unix=scrapes[-1].t)


def _over(scrapes: list[MetricSample], names: dict[str, str]) -> SpeculativeDecoding | None:
    if len(scrapes) < 2:
        return None
    if all(names.get(r) for r in COUNTERS):
        return _counted(scrapes[0], scrapes[-1], names)
    if names.get("spec_accept_length") or names.get("spec_accept_rate"):
        return _gauged(scrapes, names)
    return None


def speculative_run(metrics: Sequence[MetricSample], *, engine: str | None) -> SpeculativeDecoding | None:
    """Over the whole run; None when the server drafted nothing (or says nothing of drafts)."""
    return _over(_ok(metrics), metric_names(engine))


def speculative_points(metrics: Sequence[MetricSample], scenarios: Sequence[ScenarioSummary], *,
                       engine: str | None) -> None:
    """Give each point that ran its own figure, where the scrapes bracket it and no other point's requests."""
    scrapes, names = _ok(metrics), metric_names(engine)
    if not any(names.get(r) for r in (*COUNTERS, "spec_accept_length", "spec_accept_rate")):
        return
    ends = [m.t_end or m.t for m in scrapes]  # as sorted as the starts: one scrape at a time
    starts = [m.t for m in scrapes]
    spans = [(s.scenario, s.started_unix, s.ended_unix) for s in scenarios
             if s.started_unix is not None and s.ended_unix is not None]
    for s in scenarios:
        if s.started_unix is None or s.ended_unix is None:
            continue
        i0 = bisect_right(ends, s.started_unix) - 1  # the last scrape over before the first send
        i1 = bisect_left(starts, s.ended_unix)  # the first scrape sent after the last end
        if i0 < 0 or i1 >= len(scrapes):
            continue
        t0, t1 = starts[i0], starts[i1]
        if any(name != s.scenario and start < t1 and end > t0 for name, start, end in spans):
            i0 = bisect_left(starts, s.started_unix)  # the first scrape sent after the first send
            i1 = bisect_right(ends, s.ended_unix) - 1  # the last scrape over before the last end
            if i1 <= i0:
                continue
        s.speculative = _over(scrapes[i0:i1 + 1], names)
