"""The SLO search's part of the card, read back from summary.json: its section after the main metrics, its row of
the main table and its answer in the build's last line; and a summary.json of the layout before the kinds kept
their own results (a top-level ``slo_search``) still reads and renders the same."""

from __future__ import annotations

from cardgen.card.kindparts import kind_answers, kind_main_rows, kind_sections
from cardgen.kinds.slosearch.analysis import (
    SloPercentile,
    SloProbe,
    SloSearches,
    SloSearchResult,
    saved_searches,
)
from cardgen.schemas.summary import Summary


def _search() -> SloSearchResult:
    probes = [SloProbe(probe=n, load=load, met=met, requests=400, judged=380, percentiles=[
        SloPercentile(target="ttft_p99_s", metric="ttft", percentile=99, threshold_s=1.0, value_s=v, ci_low_s=v * 0.9,
                      ci_high_s=v * 1.1, upper_s=v * 1.05, lower_s=v * 0.95, met=met)])
        for n, (load, met, v) in enumerate([(2.0, True, 0.4), (4.0, False, 1.6), (3.0, True, 0.8)])]
    return SloSearchResult(scenario="slo-rate-in128-out16", load="rate", unit="req/s", slo={"ttft_p99_s": 1.0},
                           slo_text="TTFT p99 ≤ 1 s", resolution=0.1, low=3.0, high=4.0, crossing=3.4, requests=1200,
                           max_requests=2000, answer="between 3 and 4 req/s within the SLO (TTFT p99 ≤ 1 s)",
                           probes=probes)


def _summary(**fields: object) -> Summary:
    return Summary.model_validate({"model": "m", "figures": ["figures/slo_slo-rate-in128-out16.png"], **fields})


def test_the_section_the_row_and_the_answer_come_from_kinds_slo():
    s = _summary(kinds={"slo": SloSearches(searches=[_search()]).model_dump(mode="json")})
    text = kind_sections(s)["headlines"]
    assert text.startswith("## Highest rate within SLO\n\n**between 3.000 req/s and 4.000 req/s** with TTFT p99")
    assert "](figures/slo_slo-rate-in128-out16.png)" in text and "within 10.0 %\nof each other" in text
    assert text.count("| met |") == 2 and text.count("| missed |") == 1
    ((what, value, bracket, *_),) = kind_main_rows(s)
    assert (what, value, bracket) == ("Highest rate within SLO (TTFT p99 ≤ 1 s)", "3.000 req/s", "3.000–4.000")
    assert kind_answers(s) == ["between 3 and 4 req/s within the SLO (TTFT p99 ≤ 1 s)"]


def test_a_run_without_a_search_has_no_section_row_or_answer():
    s = _summary()
    assert kind_sections(s)["headlines"] == "" and kind_main_rows(s) == [] and kind_answers(s) == []
    assert saved_searches(s) == []


def test_an_older_summary_with_a_top_level_slo_search_reads_into_kinds_and_renders_the_same():
    search = _search().model_dump(mode="json")
    new = _summary(kinds={"slo": SloSearches(searches=[_search()]).model_dump(mode="json")})
    old = _summary(schema_version=3, slo_search=[search])
    assert old.kinds == {"slo": {"version": 1, "searches": [search]}} and saved_searches(old) == [_search()]
    assert kind_sections(old) == kind_sections(new) and kind_main_rows(old) == kind_main_rows(new)
    assert "slo_search" not in old.to_json()
    assert _summary(slo_search=[]).kinds == {}  # an older run without a search
    kept = _summary(slo_search=[search], kinds={"slo": {"version": 1, "searches": []}})
    assert saved_searches(kept) == []  # a result in kinds wins
