"""The SLO searches of a run (suite ``kind: slo``), retold from their records (pure): each probe judged again on
its own requests by the rule it stopped on (:class:`cardgen.slo.ProbeJudge`, which reaches the same verdict
whatever order the records come in, given the cap the search gave it, which the search retold probe by probe
gives again), the answer bracket, the limit's estimate from the percentile against load, a flat boundary, and
the throughput and cost at the highest load shown to meet the SLO.

A probe is the records of one ``repeat`` of the point; its load is their ``rate_rps`` (open loop) or
``parallel`` (closed loop); its sends are ordered by their schedule (open loop) or by when they were sent
(``index``, closed loop), as the program numbered them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cardgen.analysis.cost import usd_per_million
from cardgen.kinds import kind_of
from cardgen.kinds.slosearch.program import LATE, answer_words, new_search, probed, unit
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import PriceDescription
from cardgen.schemas.summary import SloPercentile, SloProbe, SloSearchResult
from cardgen.slo import PercentileEstimate, ProbeJudge, Target, Verdict, targets_text


def _percentile(e: PercentileEstimate) -> SloPercentile:
    t = e.target
    return SloPercentile(target=t.key, metric=t.metric, percentile=t.percentile, threshold_s=t.threshold_s, n=e.n,
                         effective_n=e.effective_n, value_s=e.value_s, ci_low_s=e.ci_low_s, ci_high_s=e.ci_high_s,
                         upper_s=e.upper_s, lower_s=e.lower_s, level=e.level, met=e.met, lower_level=e.lower_level,
                         tail=e.tail)


def _order_key(params: SloParams) -> Callable[[RequestRecord], tuple[float, float]]:
    if params.load == "rate":
        return lambda r: (r.scheduled_at if r.scheduled_at is not None else r.sent_at, r.index)
    return lambda r: (r.index, r.sent_at)


def probe_result(params: SloParams, number: int, records: Sequence[RequestRecord], targets: tuple[Target, ...], *,
                 cap: int) -> tuple[SloProbe, Verdict]:
    """One probe of a search (``params``: its point's): its verdict on its own records (with the ``cap`` it ran
    with), and its throughput."""
    ordered = sorted(records, key=_order_key(params))
    judge = ProbeJudge(targets, min_requests=params.min_requests, cap=cap)
    for order, r in enumerate(ordered):
        judge.add(order, Outcome.of(r), warmup=r.warmup, late=r.phase == LATE)
    verdict = judge.finish()
    load = ordered[0].rate_rps if params.load == "rate" else ordered[0].parallel
    ends = [r.end_at for r in ordered if r.end_at is not None]
    start = min(r.sent_at for r in ordered)
    duration = (max(ends) - start) if ends else None
    ok = [r for r in ordered if r.ok]
    out = sum(r.output_tokens or 0 for r in ok)
    total = out + sum(r.prompt_tokens or 0 for r in ok)
    per_s = duration if duration is not None and duration > 0 else None  # the span to divide by
    return SloProbe(probe=number, load=float(load or 0), met=verdict.met, requests=len(ordered),
                    judged=verdict.requests, look=verdict.look if verdict.met is not None else None,
                    late=verdict.late, cap=cap, futile=verdict.futile, ratio=verdict.ratio,
                    percentiles=[_percentile(e) for e in verdict.estimates], duration_s=duration,
                    output_tok_s=out / per_s if per_s else None,
                    total_tok_s=total / per_s if per_s else None), verdict


def slo_search(point: Point, records: Sequence[RequestRecord], *, gpus: int,
               price: PriceDescription | None) -> SloSearchResult:
    """The search of ``point`` from its counted records."""
    params = point.params_as(SloParams)
    targets = tuple(Target(m, p, t) for m, p, t in params.slo)
    by_probe: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_probe.setdefault(r.repeat or 0, []).append(r)
    search = new_search(params)
    probes = []
    for n in sorted(by_probe):
        cap = search.cap_for_next()
        probe, verdict = probe_result(params, n, by_probe[n], targets, cap=cap)
        search.record(probed(probe.load, verdict, requests=probe.requests, cap=cap))
        probes.append(probe)
    crossing, flat = search.crossing(), search.flat()
    at_low = next((p for p in probes if search.low is not None and p.load == search.low and p.met), None)
    result = SloSearchResult(
        scenario=point.name, group=point.group, load=params.load, unit=unit(params.load),
        slo={t.key: t.threshold_s for t in targets}, slo_text=targets_text(targets), resolution=params.resolution,
        low=search.low, high=search.high, untold=search.untold,
        crossing=crossing[0] if crossing is not None and search.low is not None and search.high is not None else None,
        flat=list(flat) if flat is not None else None, requests=search.spent, max_requests=params.max_requests,
        answer=answer_words(search, params.load, targets) if probes else "not run", probes=probes)
    if at_low is not None:
        result.output_tok_s_at_low, result.total_tok_s_at_low = at_low.output_tok_s, at_low.total_tok_s
        if price is not None:
            result.usd_per_million_output_tokens = usd_per_million(price.usd_per_gpu_hour, gpus, at_low.output_tok_s)
            result.usd_per_million_tokens = usd_per_million(price.usd_per_gpu_hour, gpus, at_low.total_tok_s)
    return result


def slo_searches(points: Sequence[Point], records: Sequence[RequestRecord], *, gpus: int,
                 price: PriceDescription | None) -> list[SloSearchResult]:
    """Every SLO search of the suite (``points``: the suite's, in order), from the run's counted records."""
    mine: dict[str, list[RequestRecord]] = {}
    for r in records:
        mine.setdefault(r.scenario, []).append(r)
    return [slo_search(p, mine.get(p.name, []), gpus=gpus, price=price) for p in points if kind_of(p).slo_search]
