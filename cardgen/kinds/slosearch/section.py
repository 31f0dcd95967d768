"""The SLO searches' part of the card (:data:`SECTION`): "Highest rate within SLO" (or concurrency) as a
headline after the main metrics, with the SLO stated, the limit's estimate where the percentile against load
crosses its threshold (or the range where the boundary is flat), the curve as a figure, and every probe with its
percentile intervals and its verdict (``section.md.j2``); a row of the card's main table per search, and its
answer in the build's last line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.sections.figures import figure_path
from cardgen.card.table import TableView
from cardgen.kinds.slosearch.analysis import (
    SloPercentile,
    SloProbe,
    SloSearches,
    SloSearchResult,
    figure_name,
)
from cardgen.kinds.slosearch.loadsearch import FLAT
from cardgen.schemas.summary import Summary


@dataclass(frozen=True)
class SloSection:
    title: str  # Highest rate within SLO | Highest concurrency within SLO
    scenario: str
    headline: str  # between 11.2 and 12 req/s | at least ... | not found ...
    slo: str
    answer: str
    probes: TableView | None
    cost: str | None  # the cost per million tokens within the SLO, at the answer's low end
    estimate: str | None  # where the percentile crosses its threshold, in words
    flat: str | None  # where the boundary is flat, in words
    requests: str  # the requests the search sent, of its budget
    resolution: float | None  # the bracket's relative width it aims at
    figure: Markup | None


def load_number(x: float | None, unit: str) -> str:
    """A probed load: a whole number of parallel requests, or a rate to four significant figures."""
    return fmt.integer(x) if unit == "parallel" else fmt.sig(x, 4)


def load_text(x: float | None, unit: str) -> str:
    return fmt.DASH if x is None else f"{load_number(x, unit)} {unit}"


def headline(r: SloSearchResult) -> str:
    """The answer as the headline says it."""
    if r.low is not None and r.high is not None:
        return f"between {load_text(r.low, r.unit)} and {load_text(r.high, r.unit)}"
    if r.low is not None:
        return f"at least {load_text(r.low, r.unit)} (every load probed met the SLO)"
    if r.high is not None:
        return f"below {load_text(r.high, r.unit)} (no load probed met the SLO)"
    return "not known: no probe could tell"


def verdict(p: SloProbe) -> str:
    if p.met is True:
        return "met"
    if p.met is False:
        return "missed"
    if p.late:
        return "could not tell (sends late: the load was not held)"
    return "could not tell" + (" (too close for its cap)" if p.futile else "")


def estimate_text(r: SloSearchResult) -> str | None:
    """Where the percentile against load crosses the threshold, when the search bracketed it and it is not flat."""
    if r.crossing is None or r.flat:
        return None
    return f"about {fmt.sig(r.crossing, 3)} {r.unit}"  # between two counts, for a closed loop


def flat_text(r: SloSearchResult) -> str | None:
    """The range over which the boundary is flat, in words."""
    if not r.flat:
        return None
    return (f"from {load_text(r.flat[0], r.unit)} to {load_text(r.flat[1], r.unit)} the percentile stays within "
            f"{FLAT * 100:g} % of its threshold: the boundary is flat there, and a small change in the server moves the "
            "limit across that range")


def _bound(c: SloPercentile) -> str:
    """The one-sided bound the verdict used; for a target it could not tell, both bounds at the same level."""
    if c.met is True and c.upper_s is not None:
        return f"bound ≤ {fmt.latency(c.upper_s)}"
    if c.met is False and c.lower_s is not None:
        return f"bound ≥ {fmt.latency(c.lower_s)}"
    low = fmt.latency(c.lower_s) if c.lower_s is not None else "?"
    high = fmt.latency(c.upper_s) if c.upper_s is not None else "?"
    return f"bounds {low} – {high}"


def cell(c: SloPercentile) -> str:
    """``812 ms (790 ms – 845 ms); bound ≤ 850 ms``: the percentile, its 95 % interval, the bound the verdict used
    (both, at the verdict's level, where it could not tell)."""
    interval = f"{fmt.latency(c.ci_low_s) if c.ci_low_s is not None else '?'} – " \
               f"{fmt.latency(c.ci_high_s) if c.ci_high_s is not None else '?'}"
    return f"{fmt.latency(c.value_s)} ({interval}); {_bound(c)}"


def slo_row(r: SloSearchResult) -> list[str]:
    """The search's row in the card's main table: the highest load shown to meet the SLO, and the bracket."""
    what = f"Highest {'rate' if r.load == 'rate' else 'concurrency'} within SLO ({r.slo_text})"
    value = load_text(r.low, r.unit) if r.low is not None else "none met"
    bracket = (f"{load_number(r.low, r.unit)}{fmt.RANGE}{load_number(r.high, r.unit)}"
               if r.low is not None and r.high is not None else fmt.DASH)
    precision = (fmt.half_width((r.high - r.low) / (r.high + r.low)) if r.low is not None and r.high is not None
                 else fmt.DASH)
    how = (f"{len(r.probes)} probes, {r.requests:,} requests, each met or missed with 95 % confidence: the highest "
           "load shown to meet, the lowest shown to miss"
           + (f"; crossing at about {fmt.sig(r.crossing, 3)}" if r.crossing is not None and not r.flat else "")
           + (f"; flat from {load_number(r.flat[0], r.unit)} to {load_number(r.flat[1], r.unit)}" if r.flat else
              f"; could not tell at {', '.join(load_number(u, r.unit) for u in r.untold)}" if r.untold else ""))
    return [what, value, bracket, precision, how]


def probe_table(r: SloSearchResult) -> TableView | None:
    if not r.probes:
        return None
    labels = [f"{c.metric.upper()} p{c.percentile:g} ≤ {fmt.latency(c.threshold_s)}" for c in r.probes[0].percentiles]
    columns = ["Probe", f"Load ({r.unit})", "Verdict", "Judged / sent (cap)", *labels, "Output tok/s"]
    rows = []
    for p in r.probes:
        cells = {c.target: cell(c) for c in p.percentiles}
        cap = f" ({p.cap:,})" if p.cap is not None else ""
        rows.append([str(p.probe + 1), load_number(p.load, r.unit), verdict(p), f"{p.judged:,} / {p.requests:,}{cap}",
                     *[cells.get(c.target, fmt.DASH) for c in r.probes[0].percentiles], fmt.sig(p.output_tok_s)])
    return TableView(columns, rows, ["r", "r", "l", "r", *["l"] * len(labels), "r"])


def _cost(r: SloSearchResult) -> str | None:
    if r.usd_per_million_tokens is None or r.low is None:
        return None
    return (f"{fmt.usd(r.usd_per_million_output_tokens)} per million output tokens, "
            f"{fmt.usd(r.usd_per_million_tokens)} per million prompt + output tokens, at {load_text(r.low, r.unit)} "
            f"({fmt.tok_s(r.output_tok_s_at_low)} output, {fmt.tok_s(r.total_tok_s_at_low)} in all)")


def _requests(r: SloSearchResult) -> str:
    budget = f" of the {r.max_requests:,} it may send" if r.max_requests is not None else ""
    return f"{r.requests:,} requests{budget}"


def slo_sections(result: SloSearches, s: Summary) -> list[SloSection]:
    return [SloSection(title=f"Highest {'rate' if r.load == 'rate' else 'concurrency'} within SLO", scenario=r.scenario,
                       headline=headline(r), slo=r.slo_text, answer=r.answer, probes=probe_table(r), cost=_cost(r),
                       estimate=estimate_text(r), flat=flat_text(r), requests=_requests(r), resolution=r.resolution,
                       figure=figure_path(s, figure_name(r.scenario)))
            for r in result.searches]


def context(result: SloSearches, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run searched nothing)."""
    return {"slo": slo_sections(result, s)} if result.searches else None


def main_rows(result: SloSearches) -> list[list[str]]:
    return [slo_row(r) for r in result.searches]


def answers(result: SloSearches) -> list[str]:
    """Each search's answer in words, for the build's last line."""
    return [r.answer for r in result.searches]


SECTION = KindSection(result=SloSearches, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="headlines", main_rows=main_rows, answers=answers)
