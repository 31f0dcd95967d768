import math

import pytest

from cardgen.errors import UsageError
from cardgen.points import expand
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
    msg = err.value.message
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
    assert points[0].params.lengths == (100, 1000, 2000)
    assert len(warnings) == 2 and all("2048" in w for w in warnings)
    assert fit_context(expand(suite), None)[0] == expand(suite)


# -- the scenario rules every driver obeys -------------------------------------------------------------------
