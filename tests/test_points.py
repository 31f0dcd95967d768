import math

import pytest

from cardgen.errors import UsageError
from cardgen.points import Point, expand
from cardgen.suite import load_suite, parse_suite


def test_builtin_suites_load_and_expand_to_unique_points():
    for name in ("quick", "standard", "full"):
        points = expand(load_suite(name))
        assert len({p.name for p in points}) == len(points)


def test_quick_has_what_the_issue_asks():
    points = expand(load_suite("quick"))
    kinds = {p.kind for p in points}
    assert {"ingest", "closed", "waves"} <= kinds
    pars = {p.parallel for p in points if p.kind == "closed" and (p.prompt_tokens, p.output_tokens) == (1024, 128)}
    assert pars == {1, 4, 10}


def test_full_covers_the_reference_grid_and_rates():
    points = expand(load_suite("full"))
    grid = {(p.prompt_tokens, p.output_tokens) for p in points if p.kind == "closed"}
    assert grid == {(i, o) for i in (32, 1024, 4096) for o in (16, 128, 1024)}
    assert max(p.parallel for p in points if p.kind == "closed") == 64
    rates = {p.rate_rps for p in points if p.kind == "open"}
    assert {1, 4, 16} <= rates and math.inf in rates


def test_point_roundtrips_through_the_wire_with_inf():
    p = expand(parse_suite("name: t\nscenarios:\n- {kind: open, prompt_tokens: 8, output_tokens: 2, rates: [inf]}"))[0]
    assert p.to_wire()["rate_rps"] == "inf"
    assert Point.from_wire(p.to_wire()) == p


@pytest.mark.parametrize("text,needle", [
    ("name: t\nscenarios: [{kind: closed, prompt_tokens: 1, output_tokens: 1, parallel: 1, paralel: 3}]", "paralel"),
    ("name: t\nscenarios: [{kind: nope}]", "kind"),
    ("name: t\nscenarios: [ {kind: closed", "YAML"),
    ("- just a list", "mapping"),
    ("name: t\nscenarios: []", "scenarios"),
    ("name: t\ncolour: red\nscenarios: [{kind: waves, prompt_tokens: 1, output_tokens: 1}]", "colour"),
])
def test_bad_suites_give_one_line_errors_naming_the_problem(text, needle):
    with pytest.raises(UsageError) as err:
        parse_suite(text, source="s.yaml")
    msg = err.value.format_message()
    assert needle in msg and "\n" not in msg


def test_unknown_suite_name(tmp_path):
    with pytest.raises(UsageError, match="unknown suite 'fast'"):
        load_suite("fast")
    with pytest.raises(UsageError, match="does not exist"):
        load_suite(str(tmp_path / "missing.yaml"))


def test_points_that_cannot_fit_the_context_are_left_out_with_a_warning():
    from cardgen.points import fit_context

    suite = parse_suite("name: t\nscenarios:\n"
                        "- {kind: ingest, prompt_tokens: [100, 1000, 2000, 3000], output_tokens: 1}\n"
                        "- {kind: closed, prompt_tokens: [1024, 4096], output_tokens: 128, parallel: 2}\n")
    points, warnings = fit_context(expand(suite), 2048)
    assert [p.name for p in points] == ["ingest", "closed-in1024-out128-p2"]
    assert points[0].lengths == [100, 1000, 2000]
    assert len(warnings) == 2 and all("2048" in w for w in warnings)
    assert fit_context(expand(suite), None)[0] == expand(suite)


# -- the scenario rules every driver obeys -------------------------------------------------------------------
def _point(**kw) -> Point:
    base = dict(name="p", kind="closed", group="g", endpoint="completions", timeout_s=10.0)
    return Point(**{**base, **kw})


def test_closed_loop_stops_at_quota_and_duration_and_never_past_max_duration():
    p = _point(parallel=4, min_requests=10, min_duration_s=2.0, max_duration_s=5.0)
    assert p.closed_continues(issued=9, quota=10, elapsed_s=3.0)
    assert p.closed_continues(issued=10, quota=10, elapsed_s=1.0)  # quota met, duration not yet
    assert not p.closed_continues(issued=10, quota=10, elapsed_s=2.0)
    assert not p.closed_continues(issued=0, quota=10, elapsed_s=5.0)
    capped = _point(parallel=4, min_requests=10, max_requests=30, target_ci=0.03)
    assert capped.closed_cap(0, 2) == 15 and p.closed_cap(0, 1) is None
    assert capped.closed_continues(issued=12, quota=10, elapsed_s=1.0, cap=30)  # not yet precise
    assert not capped.closed_continues(issued=12, quota=10, elapsed_s=1.0, cap=30, precise=True)
    assert not capped.closed_continues(issued=30, quota=10, elapsed_s=1.0, cap=30)
    assert [p.closed_quota(i, 3) for i in range(3)] == [4, 3, 3]
    assert [p.closed_slots(i, 3) for i in range(3)] == [2, 1, 1]


def test_open_loop_arrivals_are_seeded_poisson_split_over_processes():
    p = _point(kind="open", rate_rps=4.0, num_requests=2000, seed=3)
    one = p.arrival_offsets()
    assert one == p.arrival_offsets() and len(one) == 2000
    assert all(b > a for a, b in zip(one, one[1:], strict=False))
    assert abs(one[-1] / len(one) - 0.25) < 0.02  # mean gap 1 / rate
    halves = [p.arrival_offsets(i, 2) for i in range(2)]
    assert [len(h) for h in halves] == [1000, 1000]
    assert abs(halves[0][-1] / 1000 - 0.5) < 0.05  # each process at rate / 2
    burst = _point(kind="open", rate_rps=math.inf, num_requests=5)
    assert burst.arrival_offsets() == [0.0] * 5


def test_waves_ingest_and_batch_order():
    assert _point(kind="waves", max_wave=7, step=3).wave_sizes() == [1, 4, 7]
    assert _point(kind="ingest", lengths=[16, 32], repeats=2).ingest_order() == [(16, 0), (32, 0), (16, 1), (32, 1)]
    assert _point(kind="batch", warmups=1, runs=2).batch_rounds() == [(0, True), (0, False), (1, False)]
    assert _point(kind="batch").runs_on(0) and not _point(kind="batch").runs_on(1)
    assert _point(kind="closed").runs_on(1)


def _search(capacity: int, max_wave: int) -> tuple[list[int], object]:
    from cardgen.points import WaveSearch

    search = WaveSearch(max_wave=max_wave)
    while (size := search.next_size()) is not None:
        search.report(size, size > capacity)
    return search.sizes, search


@pytest.mark.parametrize("capacity", [1, 5, 37, 98, 200])
def test_wave_search_brackets_the_saturating_size_within_one_request(capacity):
    sizes, search = _search(capacity, 256)
    assert search.bracketed and search.low == capacity and search.high == capacity + 1
    assert len(sizes) <= 2 * 9  # doubling then bisecting: logarithmic, not linear
    assert sizes[:3] == [1, 2, 4][: len(sizes[:3])]


def test_wave_search_stops_at_max_wave_when_nothing_saturates():
    sizes, search = _search(10_000, 100)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 100] and not search.bracketed and search.low == 100


def test_wave_search_refuses_a_report_out_of_turn():
    from cardgen.points import WaveSearch

    search = WaveSearch(max_wave=8)
    assert search.next_size() == 1
    with pytest.raises(RuntimeError):
        search.next_size()
    with pytest.raises(RuntimeError):
        search.report(2, False)


def test_a_saturated_closed_point_skips_only_larger_counts_of_its_own_pair():
    suite = parse_suite("""
name: s
scenarios:
  - kind: closed
    prompt_tokens: [32, 1024]
    output_tokens: 16
    parallel: [1, 4, 16]
""", source="s")
    points = {p.name: p for p in expand(suite)}
    p4 = points["closed-in32-out16-p4"]
    assert p4.skips_after_saturation(points["closed-in32-out16-p16"])
    assert not p4.skips_after_saturation(points["closed-in32-out16-p1"])
    assert not p4.skips_after_saturation(points["closed-in1024-out16-p16"])
    no = Point(**{**p4.to_wire(), "stop_at_saturation": False})
    assert not no.skips_after_saturation(points["closed-in32-out16-p16"])


def test_sweeps_and_batch_rounds_with_and_without_a_target():
    plain = _point(kind="ingest", lengths=[16, 32], repeats=3)
    assert [plain.more_sweeps(n, precise=True) for n in range(4)] == [True, True, True, False]
    aimed = _point(kind="ingest", lengths=[16, 32], repeats=3, target_ci=0.03)
    assert aimed.more_sweeps(0, precise=True) and not aimed.more_sweeps(1, precise=True)
    assert aimed.more_sweeps(1, precise=False) and not aimed.more_sweeps(3, precise=False)
    batch = _point(kind="batch", runs=3, target_ci=0.03, max_runs=5)
    assert batch.more_batch_rounds(2, precise=True) and not batch.more_batch_rounds(3, precise=True)
    assert batch.more_batch_rounds(4, precise=False) and not batch.more_batch_rounds(5, precise=False)
    assert not _point(kind="batch", runs=3).more_batch_rounds(3, precise=False)


def test_a_coarser_wave_search_stops_sooner_but_still_brackets():
    from cardgen.points import WaveSearch

    search = WaveSearch(max_wave=512, resolution=16)
    while (size := search.next_size()) is not None:
        search.report(size, size > 104)
    assert search.bracketed and search.low <= 104 < search.high and search.high - search.low <= 16
    assert search.sizes[-1] >= 64 and len(search.sizes) <= 10


def test_closed_quota_goes_only_to_processes_with_users():
    one = _point(parallel=1, min_requests=12, max_requests=20)
    assert [one.closed_slots(i, 2) for i in range(2)] == [1, 0]
    assert [one.closed_quota(i, 2) for i in range(2)] == [12, 0]
    assert [one.closed_cap(i, 2) for i in range(2)] == [20, 0]
    three = _point(parallel=3, min_requests=10)
    assert [three.closed_quota(i, 4) for i in range(4)] == [4, 3, 3, 0]
