"""The SLO searches of a run, retold from their request rows (pure): the kind's analysis (:data:`ANALYSIS`, saved as
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

import math
from typing import Any

import pandas as pd
from pydantic import Field

from cardgen.analysis.cost import usd_per_million
from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.kinds.slosearch.program import LATE, answer_words, new_search, probed, unit
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.points import Point
from cardgen.schemas.run import PriceDescription
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import KindResult, Summary
from cardgen.slo import PercentileEstimate, ProbeJudge, Target, Verdict, figure_latencies, targets_text

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


# the columns of a request row (cardgen.analysis.requests.COLUMNS) a probe is retold from: its figures there are
# RequestFigures', those its judge read
_PROBE_COLUMNS = ("scheduled_at", "sent_at", "index", "line", "rate_rps", "parallel", "warmup", "phase", "ok",
                  "recorded_end_at", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s", "tpot_s")


def _known(value: float) -> float | None:
    """A row's value, None where its record had none (NaN)."""
    return None if math.isnan(value) else value


class _Rows:
    """A probe's request rows as plain values by column, and its sends in the order the program numbered them:
    by schedule (open loop) or by send (closed loop), then in the file's order."""

    def __init__(self, params: SloParams, rows: pd.DataFrame) -> None:
        self.c: dict[str, list[Any]] = {name: rows[name].tolist() for name in _PROBE_COLUMNS}
        self.chunk_times = rows["chunk_times"].to_numpy()  # read only where a target judges ITL
        c = self.c
        if params.load == "rate":
            first = [s if math.isnan(at) else at for at, s in zip(c["scheduled_at"], c["sent_at"], strict=True)]
            key = list(zip(first, c["index"], c["line"], strict=True))
        else:
            key = list(zip(c["index"], c["sent_at"], c["line"], strict=True))
        self.order = sorted(range(len(key)), key=key.__getitem__)

    def latencies(self, i: int, metrics: frozenset[str]) -> dict[str, list[float]]:
        """What row ``i`` gave the judge (:func:`cardgen.slo.latencies` of its record): from its figures, the
        card's, which are the record's :class:`cardgen.outcome.RequestFigures`."""
        c = self.c
        return figure_latencies(c["ok"][i], c["ttft_s"][i], c["e2e_s"][i], c["tpot_s"][i],
                                self.chunk_times[i] if "itl" in metrics else (), metrics)


def probe_result(params: SloParams, number: int, rows: pd.DataFrame, targets: tuple[Target, ...], *,
                 cap: int) -> tuple[SloProbe, Verdict]:
    """One probe of a search (``params``: its point's): its verdict on its own request rows (with the ``cap`` it
    ran with), and its throughput."""
    probe = _Rows(params, rows)
    c, ordered = probe.c, probe.order
    judge = ProbeJudge(targets, min_requests=params.min_requests, cap=cap)
    for order, i in enumerate(ordered):
        warmup = c["warmup"][i]
        judge.add_latencies(order, {} if warmup else probe.latencies(i, judge.metrics), warmup=warmup,
                            late=c["phase"][i] == LATE)
    verdict = judge.finish()
    load = _known(c["rate_rps"][ordered[0]] if params.load == "rate" else c["parallel"][ordered[0]])
    ends = [at for at in c["recorded_end_at"] if not math.isnan(at)]
    start = min(c["sent_at"])
    duration = (max(ends) - start) if ends else None
    ok = [i for i in ordered if c["ok"][i]]
    out = sum(0 if math.isnan(n := c["output_tokens"][i]) else int(n) for i in ok)
    total = out + sum(0 if math.isnan(n := c["prompt_tokens"][i]) else int(n) for i in ok)
    per_s = duration if duration is not None and duration > 0 else None  # the span to divide by
    return SloProbe(probe=number, load=float(load or 0), met=verdict.met, requests=len(ordered),
                    judged=verdict.requests, look=verdict.look if verdict.met is not None else None,
                    late=verdict.late, cap=cap, futile=verdict.futile, ratio=verdict.ratio,
                    percentiles=[_percentile(e) for e in verdict.estimates], duration_s=duration,
                    output_tok_s=out / per_s if per_s else None,
                    total_tok_s=total / per_s if per_s else None), verdict


def slo_search(point: Point, rows: pd.DataFrame, *, gpus: int, price: PriceDescription | None) -> SloSearchResult:
    """The search of ``point`` from its counted request rows."""
    params = point.params_as(SloParams)
    targets = tuple(Target(m, p, t) for m, p, t in params.slo)
    repeats = rows["repeat"].fillna(0).astype(int) if len(rows) else rows["repeat"]
    by_probe = {int(n): group for n, group in rows.groupby(repeats.to_numpy(), sort=True)} if len(rows) else {}
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
    """Every SLO search of the run (its points in suite order), from their counted request rows."""
    rows = run.requests
    mine = {str(name): group for name, group in rows.groupby("scenario", sort=False)} if len(rows) else {}
    gpus = run.info.gpu.count or 1
    return SloSearches(searches=[slo_search(p, mine.get(p.name, rows.iloc[0:0]), gpus=gpus, price=run.info.price)
                                 for p in run.points])


ANALYSIS = KindAnalysis(result=SloSearches, analyse=slo_searches)
