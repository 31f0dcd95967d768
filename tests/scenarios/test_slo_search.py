"""The SLO search (suite ``kind: slo``), in virtual time, in process: against oracle servers whose limit the test
knows exactly, the answer's interval holds it; the analysis retells every probe's verdict from the records; the
card says it.

Oracles:
- closed loop (``load: parallel``): a fixed server whose users move in lockstep (one-token prompts prefilled for
  nothing, every request of the same length, all users starting together), so every request's TPOT is exactly one
  decode step, ``overhead + per_seq x users``: the highest concurrency within a TPOT threshold is arithmetic;
- open loop (``load: rate``): a fixed server that runs one request at a time, each for exactly ``D`` seconds, fed
  by Poisson arrivals: an M/D/1 queue, whose waiting-time distribution Erlang gave in 1909, so the rate at which
  the p90 of TTFT (the wait plus the first step) crosses a threshold is computed here, to 40 digits, without the
  simulator;
- the virtual GPU server itself (roofline, CodeLlama-7b on an A100), whose limit the test finds by brute force: a
  long closed loop at every concurrency.
"""

from __future__ import annotations

import math

import pytest
from simruns import simulate
from slo_oracles import MD1, Lockstep, Plateau, md1_limit, md1_waiting_cdf, run_search

from cardgen.analysis.analyse import analyse
from cardgen.analysis.requests import request_frame
from cardgen.analysis.rundata import RunData
from cardgen.card.render import render_card
from cardgen.errors import UsageError
from cardgen.kinds.slosearch.analysis import saved_searches, slo_search
from cardgen.kinds.slosearch.loadsearch import (
    PROBE_REQUESTS,
    LoadSearch,
    Probed,
    crossing,
    flat_range,
    monotone_curve,
)
from cardgen.kinds.slosearch.program import answer_words
from cardgen.kinds.slosearch.section import flat_text
from cardgen.points import expand
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions, drive
from cardgen.sim.perf import FixedPerf
from cardgen.slo import Target
from cardgen.suite import parse_suite

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

QUIET = SimConfig(model="test-model", perf="fixed", chunked_prefill=True, metrics=False)


def _suite(entry: str):
    return parse_suite(f"name: slo\nscenarios:\n  - {entry}\n", source="test suite")


# --- the search, alone ----------------------------------------------------------------------------------------


def _walk(search: LoadSearch, verdict, ratio=None) -> list[float]:
    loads = []
    while (plan := search.next_probe()) is not None:
        loads.append(plan.load)
        search.report(Probed(plan.load, verdict(plan.load), requests=min(plan.cap, 100), cap=plan.cap,
                             ratio=None if ratio is None else ratio(plan.load)))
    return loads


def test_the_search_doubles_until_a_miss_then_bisects_to_the_resolution():
    search = LoadSearch(start=1, lowest=1 / 64, highest=1024, resolution=0.05, whole=False)
    loads = _walk(search, lambda x: x <= 11.5)
    assert loads[:5] == [1, 2, 4, 8, 16] and search.bracketed
    assert search.low <= 11.5 < search.high and (search.high - search.low) <= 0.05 * search.low


def test_parallel_counts_are_whole_and_end_one_apart():
    search = LoadSearch(start=4, lowest=1, highest=256, resolution=0.05, whole=True)
    loads = _walk(search, lambda x: x <= 20)
    assert all(x == int(x) for x in loads) and (search.low, search.high) == (20, 21)


def test_the_search_shrinks_when_the_first_load_misses_and_stops_at_its_bounds():
    search = LoadSearch(start=8, lowest=0.5, highest=64, resolution=0.1, whole=False)
    assert _walk(search, lambda x: x <= 0.1) == [8, 4, 2, 1, 0.5] and (search.low, search.high) == (None, 0.5)
    search = LoadSearch(start=8, lowest=1, highest=64, resolution=0.1, whole=False)
    assert _walk(search, lambda x: True) == [8, 16, 32, 64] and (search.low, search.high) == (64, None)


def test_near_the_limit_it_aims_either_side_of_the_crossing_beyond_the_loads_it_could_not_tell():
    # the percentile grows as load^2 and crosses at 10; within 2 % of it no probe can tell
    search = LoadSearch(start=1, lowest=1 / 64, highest=1024, resolution=0.05, whole=False, budget=100_000)
    loads = _walk(search, lambda x: None if abs(x / 10 - 1) < 0.02 else x < 10, ratio=lambda x: (x / 10) ** 2)
    assert search.untold and all(abs(u / 10 - 1) < 0.02 for u in search.untold)
    assert search.low < 10 < search.high and search.high / search.low <= 1.1  # twice the resolution
    assert search.crossing()[0] == pytest.approx(10, rel=1e-6)  # the line through the probes near the threshold
    first = loads.index(min(search.untold, key=loads.index))
    assert len(set(loads)) == len(loads) and first < len(loads) - 1  # it went on, never twice at one load


def test_the_budget_caps_every_probe_and_the_search():
    search = LoadSearch(start=1, lowest=1, highest=1024, resolution=0.05, whole=False, budget=20_000,
                        min_requests=20)
    caps = []
    while (plan := search.next_probe()) is not None:
        caps.append(plan.cap)
        search.report(Probed(plan.load, None, requests=plan.cap, cap=plan.cap, ratio=1.0))
    assert caps[0] == PROBE_REQUESTS and sum(caps) <= 20_000 and search.spent <= 20_000


def test_a_search_stopped_by_its_budget_says_so():
    # the sockets test's oracle on a busy box: 8 and 4 miss at once, and 2 spends what is left to be told met
    search = LoadSearch(start=8, lowest=1, highest=64, resolution=0.05, whole=True, budget=400, min_requests=20)
    for met in (False, False, True):
        plan = search.next_probe()
        spent = plan.cap if met else 20
        search.report(Probed(plan.load, met, requests=spent, cap=plan.cap, ratio=0.9 if met else 3.0))
    assert search.next_probe() is None and (search.low, search.high) == (2, 4) and not search.untold
    assert search.out_of_budget
    said = answer_words(search, "parallel", (Target("ttft", 90, 0.06),))
    assert said == ("highest concurrency within SLO (TTFT p90 ≤ 60 ms) between 2 and 4 parallel; its budget of 400 "
                    "requests ran out before a probe could narrow it (3 probes)")
    # with the budget to spare it probes 3 and ends one apart, as it should, not out of budget
    search = LoadSearch(start=8, lowest=1, highest=64, resolution=0.05, whole=True, budget=400, min_requests=20)
    _walk(search, lambda x: x <= 2)
    assert (search.low, search.high) == (2, 3) and not search.out_of_budget
    assert "budget" not in answer_words(search, "parallel", (Target("ttft", 90, 0.06),))


def test_the_crossing_is_a_weighted_line_through_the_probes_near_the_threshold():
    points = [(2.0, 0.5, 100.0), (4.0, 0.9, 1000.0), (5.0, 1.2, 1000.0), (8.0, 3.0, 10.0)]
    x, slope = crossing(points)
    assert 4 < x < 5 and slope == pytest.approx(math.log(1.2 / 0.9) / math.log(5 / 4), rel=0.05)
    assert crossing([(1.0, 0.5, 1.0), (2.0, 0.8, 1.0)]) is None  # it does not cross within the loads probed
    # noise that says the percentile fell with load is pooled away
    assert monotone_curve([(1.0, 0.9, 1.0), (2.0, 0.8, 1.0), (3.0, 1.2, 1.0)])[0][1] == pytest.approx(
        math.sqrt(0.9 * 0.8))


def test_a_flat_boundary_is_named_with_its_range():
    probes = [Probed(x, None, ratio=1.0 + (0.01 if x > 6 else -0.01)) for x in (4.0, 6.0, 8.0)]
    assert flat_range(probes, 0.05, whole=False) == (4.0, 8.0)
    assert flat_range(probes + [Probed(9.0, None, ratio=1.06)], 0.05, whole=False) == (4.0, 8.0)
    assert flat_range([Probed(4.0, None, ratio=0.99), Probed(4.2, None, ratio=1.01)], 0.05, whole=False) is None
    assert flat_range([Probed(4.0, None, ratio=0.97), Probed(8.0, None, ratio=1.04)], 0.05, whole=False) is None
    # two loads it could not tell, both below the threshold on a steep curve: not flat
    steep = [Probed(3.9, True, ratio=0.86), Probed(4.0, None, ratio=0.96), Probed(4.5, None, ratio=0.98),
             Probed(4.6, False, ratio=1.05), Probed(5.0, False, ratio=1.3)]
    assert flat_range(steep, 0.05, whole=False) is None


# --- the closed-loop oracle: TPOT = overhead + per_seq x users, exactly ---------------------------------------

LOCKSTEP = FixedPerf(prefill_tok_s=1e12, step_overhead_s=0.010, per_seq_s=0.002, max_num_seqs=256)


def test_closed_loop_oracle_the_answer_is_the_exact_limit_and_the_analysis_retells_it():
    # TPOT at c users = 10 + 2c ms: within 51 ms up to 20 users, beyond it from 21
    suite = _suite("{kind: slo, load: parallel, prompt_tokens: 1, output_tokens: 32, slo: {tpot_p99_s: 0.051}, "
                   "start: 4}")
    run = simulate(suite, QUIET, perf=LOCKSTEP)
    (point,) = run.drive.points
    assert point.stop == "precision reached"
    assert "between 20 and 21 parallel" in point.detail
    summary = analyse(RunData(info=run.info, requests=run.drive.records)).summary
    (search,) = saved_searches(summary)
    assert (search.low, search.high, search.unit, search.slo) == (20, 21, "parallel", {"tpot_p99_s": 0.051})
    assert search.answer == point.detail  # the analysis reaches every verdict the program stopped on
    for probe in search.probes:
        assert probe.met is (probe.load <= 20)
        (tpot,) = probe.percentiles
        assert tpot.value_s == pytest.approx(0.010 + 0.002 * probe.load, abs=1e-6)  # Unix times: 0.1 µs
    assert [p.load for p in search.probes] == [4, 8, 16, 32, 24, 20, 22, 21]
    card = render_card(analyse(RunData(info=run.info, requests=run.drive.records)), date="2026-11-25")
    assert "## Highest concurrency within SLO" in card and "**between 20 parallel and 21 parallel**" in card
    assert "TPOT p99 ≤ 51 ms" in card and card.count("| met |") == 4 and card.count("| missed |") == 4


def test_the_search_runs_whole_on_one_process_when_the_load_is_split():
    suite = _suite("{kind: slo, load: parallel, prompt_tokens: 1, output_tokens: 32, slo: {tpot_p99_s: 0.051}, "
                   "start: 4}")
    run = drive(expand(suite), QUIET, perf=LOCKSTEP, options=DriveOptions(processes=2))
    assert {r.record.worker for r in run.requests} == {"worker-0"}
    assert "between 20 and 21 parallel" in run.points[0].detail


# --- the open-loop oracle: M/D/1 ---------------------------------------------------------------------------------

STEP_S, OUTPUT = 0.005, 20  # one request at a time: a 5 ms prefill step then 19 decode steps of 5 ms
ONE_AT_A_TIME = FixedPerf(prefill_tok_s=1e12, step_overhead_s=STEP_S, per_seq_s=0.0, max_num_seqs=1)


def test_the_m_d_1_formula_against_the_textbook_case():
    # P(W = 0) = 1 - rho, and the mean of the wait (Pollaczek-Khinchine) rho D / (2 (1 - rho)) from the cdf
    assert md1_waiting_cdf(0.0, 4.0, 0.1) == pytest.approx(0.6)
    grid = [(i + 0.5) * 0.002 for i in range(2000)]  # midpoints
    mean = sum(1 - md1_waiting_cdf(t, 4.0, 0.1) for t in grid) * 0.002
    assert mean == pytest.approx(0.4 * 0.1 / (2 * 0.6), rel=0.01)


def test_open_loop_oracle_the_interval_holds_the_true_limit():
    threshold = 0.150  # TTFT p90 = the p90 of the wait + the first step
    service = STEP_S * OUTPUT
    limit = md1_limit(threshold - STEP_S, service, 0.90)
    assert 4.5 < limit < 5.2  # about 4.86 requests/s
    suite = _suite(f"{{kind: slo, load: rate, prompt_tokens: 1, output_tokens: {OUTPUT}, slo: {{ttft_p90_s: "
                   f"{threshold}}}, start: 1, resolution: 0.05, max_requests: 2000}}")
    run = simulate(suite, QUIET, perf=ONE_AT_A_TIME)
    summary = analyse(RunData(info=run.info, requests=run.drive.records)).summary
    (search,) = saved_searches(summary)
    assert search.low is not None and search.high is not None
    assert search.low <= limit <= search.high, (search.low, limit, search.high, search.answer)
    assert search.high / search.low < 1.6  # not an empty answer: the bracket is tight around the limit
    for probe in search.probes:  # every verdict is the truth
        assert probe.met is None or probe.met is (probe.load <= limit), probe
    assert search.answer == run.drive.points[0].detail
    records = [r for r in run.drive.records if r.repeat == 0]
    assert all(r.scheduled_at is not None and r.rate_rps == 1.0 for r in records)
    assert not any(r.phase == "late" for r in run.drive.records)  # the schedule never ran dry


# --- coverage against the oracles, many seeded searches (make bench runs 200 of each: tests/bench/bench_slo.py) --

MD1_P99 = {"service_s": 0.1, "first_s": 0.005, "ttft_p99_s": 0.3}  # the limit: 4.57 req/s, 46 % busy
LOCKSTEP_P99 = {"overhead_s": 0.010, "per_user_s": 0.0005, "steps": 31, "jitter": 0.2, "tpot_p99_s": 0.0198}


def md1_search(seed: int, budget: int):
    o = MD1_P99
    (point,) = expand(_suite(f"{{kind: slo, load: rate, prompt_tokens: 1, output_tokens: 20, slo: {{ttft_p99_s: "
                             f"{o['ttft_p99_s']}}}, seed: {seed}, max_requests: {budget}}}"))
    program, _ = run_search(point, MD1(o["service_s"], o["first_s"]))
    return program.search, md1_limit(o["ttft_p99_s"] - o["first_s"], o["service_s"], 0.99)


def lockstep_search(seed: int, budget: int):
    o = LOCKSTEP_P99
    server = Lockstep(o["overhead_s"], o["per_user_s"], o["steps"], jitter=o["jitter"], seed=seed)
    (point,) = expand(_suite(f"{{kind: slo, load: parallel, prompt_tokens: 1, output_tokens: {o['steps'] + 1}, "
                             f"slo: {{tpot_p99_s: {o['tpot_p99_s']}}}, start: 4, max_requests: {budget}}}"))
    program, _ = run_search(point, server)
    return program.search, server.limit(o["tpot_p99_s"], 0.99)


def test_the_search_keys_its_requests_on_their_tags_not_on_the_objects_handed_back():
    o = MD1_P99
    (point,) = expand(_suite(f"{{kind: slo, load: rate, prompt_tokens: 1, output_tokens: 20, slo: {{ttft_p99_s: "
                             f"{o['ttft_p99_s']}}}, seed: 5, max_requests: 3000}}"))
    same, _ = run_search(point, MD1(o["service_s"], o["first_s"]))
    copied, ended = run_search(point, MD1(o["service_s"], o["first_s"]), copies=True)
    assert len({e.send.tag for e in ended}) == len(ended)  # every send has its own
    assert [p.load for p in copied.search.probes] == [p.load for p in same.search.probes]
    assert (copied.search.low, copied.search.high, copied.search.spent) == (same.search.low, same.search.high,
                                                                           same.search.spent)


def covers(search, limit: float) -> bool:
    return (search.low is None or search.low <= limit) and (search.high is None or search.high > limit)


def test_the_oracles_limits():
    assert md1_limit(0.3 - 0.005, 0.1, 0.99) == pytest.approx(4.5703, abs=1e-3)
    server = Lockstep(0.010, 0.0005, 31, jitter=0.2)
    assert server.limit(0.0198, 0.99) == 16 and server.percentile_s(16, 0.99) < 0.0198 < server.percentile_s(17, 0.99)


@pytest.mark.parametrize("oracle", [md1_search, lockstep_search])
def test_seeded_searches_against_the_oracles_hold_the_limit(oracle):
    results = [oracle(seed, 10_000) for seed in range(4)]
    assert all(covers(search, limit) for search, limit in results), [(s.low, s.high, lim) for s, lim in results]
    assert all(search.low is not None and search.high is not None for search, _ in results)
    assert all(search.spent <= 10_000 for search, _ in results)


def test_a_flat_boundary_gives_no_false_met_and_is_named():
    server = Plateau(0.010, 0.0, 31, jitter=0.2, seed=3)
    threshold = server.percentile_s(16, 0.99)
    limit = server.limit(threshold, 0.99)
    assert limit == 24 and server.percentile_s(8, 0.99) == threshold < server.percentile_s(25, 0.99)
    (point,) = expand(_suite(f"{{kind: slo, load: parallel, prompt_tokens: 1, output_tokens: 32, slo: {{tpot_p99_s: "
                             f"{threshold!r}}}, start: 4, max_requests: 60000}}"))
    program, ended = run_search(point, server)
    search = program.search
    assert not [p.load for p in search.probes if p.met is True and p.load > limit]  # no false "met"
    assert covers(search, limit) and search.flat() is not None
    low, high = search.flat()
    assert low <= 9 and high >= 22  # (it is 8 to 24)
    assert "the boundary is flat: from" in program.detail
    records = [e.record(point, i) for i, e in enumerate(ended)]
    result = slo_search(point, request_frame(records), gpus=1, price=None)  # the analysis retells it, the card says it
    assert result.answer == program.detail and result.flat == [low, high]
    assert flat_text(result).startswith(f"from {low:g} parallel to {high:g} parallel the percentile stays within 5 %")


# --- the virtual GPU server: the truth by brute force ---------------------------------------------------------


def test_on_the_virtual_server_the_answer_holds_the_limit_found_by_brute_force():
    config = SimConfig(model="CodeLlama-7b", gpu="A100-80GB", metrics=False)
    threshold = 0.0185
    suite = _suite(f"{{kind: slo, load: parallel, prompt_tokens: 256, output_tokens: 64, "
                   f"slo: {{tpot_p90_s: {threshold}}}, start: 8, max_requests: 1500}}")
    run = simulate(suite, config)
    (search,) = saved_searches(analyse(RunData(info=run.info, requests=run.drive.records)).summary)
    assert search.low is not None and search.high is not None, search.answer

    def p90_tpot(users: int) -> float:
        sweep = parse_suite(f"name: s\nscenarios:\n  - {{kind: closed, prompt_tokens: [256], output_tokens: [64], "
                            f"parallel: [{users}], min_requests: {users * 12}}}\n")
        records = [r for r in drive(expand(sweep), config).records if not r.warmup]
        steady = sorted(records, key=lambda r: r.sent_at)[users:]  # past the first round
        tpots = sorted((r.end_at - r.first_token_at) / (r.output_tokens - 1) for r in steady)
        return tpots[math.ceil(0.9 * len(tpots)) - 1]

    low, high = int(search.low), int(search.high)
    assert p90_tpot(low) <= threshold < p90_tpot(high)  # the limit lies inside the answer


# --- the suite entry --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "said"), [
    ("{kind: slo, load: rate, prompt_tokens: 8, output_tokens: 8, slo: {ttft_p99: 2}}", "write <ttft|tpot|itl|e2e>"),
    ("{kind: slo, load: parallel, prompt_tokens: 8, output_tokens: 8, slo: {ttft_p99_s: 2}, start: 2.5}",
     "whole numbers"),
    ("{kind: slo, load: rate, prompt_tokens: 8, slo: {ttft_p99_s: 2}}", "give 'prompt_tokens' and 'output_tokens'"),
    ("{kind: slo, load: rate, prompt_tokens: 8, output_tokens: 8, slo: {ttft_p99_s: 2}, start: 8, max_load: 4}",
     "must be ordered"),
    ("{kind: slo, load: qps, prompt_tokens: 8, output_tokens: 8, slo: {ttft_p99_s: 2}}", "load"),
])
def test_a_bad_entry_is_a_one_line_error(entry, said):
    with pytest.raises(UsageError) as err:
        _suite(entry)
    assert said in err.value.message and "\n" not in err.value.message


def test_a_dataset_search_sends_its_sample_over_and_over(tmp_path):
    data = tmp_path / "reqs.jsonl"
    data.write_text("".join(f'{{"prompt": "{" ".join(["w"] * (8 + i))}", "output_tokens": {8 + i}}}\n'
                            for i in range(5)))
    suite = _suite(f"{{kind: slo, load: parallel, dataset: {data}, num_requests: 5, slo: {{e2e_p50_s: 10}}, "
                   "start: 2, max_load: 4, min_requests: 10}")
    run = simulate(suite, QUIET, perf=LOCKSTEP)
    records = run.drive.records
    assert run.drive.points[0].name == "slo-parallel-reqs" and {r.item for r in records} == set(range(5))
    assert all(r.output_tokens == r.output_tokens_target for r in records)
    assert "every load up to 4 parallel met the SLO" in run.drive.points[0].detail
