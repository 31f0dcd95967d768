"""The SLO searches of a run, retold from their records (pure): the kind's analysis (:data:`ANALYSIS`, saved as
``summary.json`` ``kinds.slo``). Each probe is judged again on its own requests by the rule it stopped on
(:class:`cardgen.slo.ProbeJudge`, which reaches the same verdict whatever order the records come in, given the
cap the search gave it, which the search retold probe by probe gives again); then the answer bracket, the
limit's estimate from the percentile against load, a flat boundary, and the throughput and cost at the highest
load shown to meet the SLO.

A probe is the records of one ``repeat`` of the point; its load is their ``rate_rps`` (open loop) or
``parallel`` (closed loop); its sends are ordered by their schedule (open loop) or by when they were sent
(``index``, closed loop), as the program numbered them.

What it saves (:class:`SloSearches`) the card and the figures read back (:mod:`cardgen.kinds.slosearch.section`,
:mod:`cardgen.kinds.slosearch.figures`). Files written before the kinds kept their own results held the searches
in a top-level ``slo_search``; :class:`cardgen.schemas.summary.Summary` reads those into ``kinds.slo`` as version 1
of this result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import Field

from cardgen.analysis.cost import usd_per_million
from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.kinds.slosearch.program import LATE, answer_words, new_search, probed, unit
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.outcome import Outcome
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.run import PriceDescription
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult, Summary
from cardgen.slo import PercentileEstimate, ProbeJudge, Target, Verdict, targets_text

FIGURE = "slo_{scenario}.png"  # one per search, in the run's figures/


def figure_name(scenario: str) -> str:
    """The file name of the figure of the search of point ``scenario``."""
    return FIGURE.format(scenario=scenario)


class SloPercentile(Saved):
    """One SLO target as a probe was judged on it (:mod:`cardgen.slo`): the percentile of its requests, its
    two-sided 95 % interval, and the one-sided bounds its verdict used: the upper at ``level`` (the tail bound
    when ``tail``, else an order statistic), the lower at ``lower_level`` (an order statistic)."""

    target: str  # the suite's key: ttft_p99_s
    metric: str  # ttft | tpot | itl | e2e
    percentile: float
    threshold_s: float
    n: int = 0  # values judged (requests; gaps for itl)
    effective_n: float | None = None  # independent draws' worth of them
    value_s: float | None = None
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    upper_s: float | None = None
    lower_s: float | None = None
    level: float | None = None
    met: bool | None = None
    lower_level: float | None = None
    tail: bool = False


class SloProbe(Saved):
    """One load of an SLO search: its verdict (``met`` None: it could not tell) and the evidence."""

    probe: int  # 0, 1 ... in the order they ran
    load: float  # requests/s or parallel requests
    met: bool | None = None
    requests: int = 0  # sent
    judged: int = 0  # the requests its verdict rests on (sent in order, all ended; warm-up left out)
    look: int | None = None  # the look that decided it (cardgen.slo)
    late: bool = False  # a send left after its time: the load was not held (never "met")
    cap: int | None = None  # the requests the search let it send at most
    futile: bool = False  # it stopped undecided: even its cap would not have decided it
    ratio: float | None = None  # the binding target's percentile over its threshold
    percentiles: list[SloPercentile] = Field(default_factory=list)
    duration_s: float | None = None  # first send to last end
    output_tok_s: float | None = None  # the probe's successful requests' output tokens / duration
    total_tok_s: float | None = None


class SloSearchResult(Saved):
    """An SLO search (suite ``kind: slo``): the highest load shown to meet the SLO (``low``) and the lowest shown
    to miss it (``high``), either None when no probe showed it; ``untold`` the loads in between that could not be
    told; ``crossing`` where the percentile against load crosses the threshold (the binding target's, made
    non-decreasing, interpolated in log-log: :func:`cardgen.kinds.slosearch.loadsearch.crossing`); ``flat`` the loads
    over which the boundary is flat (:func:`cardgen.kinds.slosearch.loadsearch.flat_range`)."""

    scenario: str
    group: str = ""
    load: str  # rate | parallel
    unit: str  # req/s | parallel
    slo: dict[str, float] = Field(default_factory=dict)  # the targets, by the suite's keys
    slo_text: str = ""  # TTFT p99 <= 2 s and TPOT p99 <= 100 ms
    resolution: float | None = None
    low: float | None = None
    high: float | None = None
    untold: list[float] = Field(default_factory=list)
    crossing: float | None = None
    flat: list[float] | None = None  # [from, to]
    requests: int = 0  # sent by every probe
    max_requests: int | None = None  # the search's budget
    answer: str = ""  # in words
    probes: list[SloProbe] = Field(default_factory=list)
    # at ``low``: the probe's throughput, and with a price its cost per million tokens within the SLO
    output_tok_s_at_low: float | None = None
    total_tok_s_at_low: float | None = None
    usd_per_million_output_tokens: float | None = None
    usd_per_million_tokens: float | None = None


class SloSearches(KindResult):
    """The kind's result: one search per suite entry of kind ``slo``, in suite order."""

    version: int = 1
    searches: list[SloSearchResult] = Field(default_factory=list)


def saved_searches(summary: Summary) -> list[SloSearchResult]:
    """The run's searches as ``summary`` keeps them (``kinds.slo``; none when the run searched nothing)."""
    saved = summary.kinds.get("slo")
    return SloSearches.model_validate(saved).searches if saved is not None else []




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


def slo_searches(run: KindRun) -> SloSearches:
    """Every SLO search of the run (its points in suite order), from their counted records."""
    mine: dict[str, list[RequestRecord]] = {}
    for r in run.records:
        mine.setdefault(r.scenario, []).append(r)
    gpus = run.info.gpu.count or 1
    return SloSearches(searches=[slo_search(p, mine.get(p.name, []), gpus=gpus, price=run.info.price)
                                 for p in run.points])


ANALYSIS = KindAnalysis(result=SloSearches, analyse=slo_searches)
