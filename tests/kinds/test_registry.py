"""The kinds' registry (cardgen.kinds) is the one place that tells kinds apart by name.

Every kind a suite can declare has a registry entry and a program; and outside the registry and the kinds' own
folders (cardgen/kinds/<kind>/: its schema, its program, its traits), no package code compares a kind (a ``kind`` name, attribute or column, or a
kind's name as a string) with ``==``, ``!=``, ``in`` or ``not in``: it asks the kind's traits instead.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from cardgen.kinds import KINDS, UNKNOWN, KindParams, kind_of, program_for
from cardgen.kinds.closed.schema import ClosedParams
from cardgen.points import Point, expand
from cardgen.suite import Scenario, load_suite

PACKAGE = Path(__file__).resolve().parents[2] / "cardgen"
KIND_FILES = ("closed", "openloop", "waves", "ingest", "batch", "prefix", "chat", "slosearch", "depth", "images")
# where kinds may be told apart by name: the registry (cardgen/kinds/: its record of a kind, what entries share, the
# programs' language) and each kind's own folder (its schema, program and traits)
KIND_MODULES = ({f"kinds/{m}.py" for m in ("__init__", "kind", "entry", "program")}
                | {f"kinds/{k}/{m}.py" for k in KIND_FILES for m in ("__init__", "schema", "program")})
ALLOWED = 15  # at most this many such tests in the whole package, all of them in KIND_MODULES


def suite_kinds() -> set[str]:
    """Every ``kind`` a suite entry can declare (the Literal of each entry model of :data:`cardgen.suite.Scenario`)."""
    union = typing.get_args(Scenario)[0]
    return {typing.get_args(entry.model_fields["kind"].annotation)[0] for entry in typing.get_args(union)}


def kind_params() -> dict[str, type]:
    """Each kind's params class, by the kind it names (the members of :data:`cardgen.kinds.KindParams`)."""
    return {cls().kind: cls for cls in typing.get_args(typing.get_args(KindParams)[0])}


def test_every_suite_kind_has_a_registry_entry_params_and_a_program():
    assert suite_kinds() == set(KINDS)
    assert all(kind.program is not None and kind.program.kind == name for name, kind in KINDS.items())
    assert set(kind_params()) == set(KINDS)
    for name, kind in KINDS.items():
        assert kind.name == name and kind_of(name) is kind


def test_every_expanded_point_has_its_kind_and_program():
    for suite in ("quick", "standard", "full", "sharegpt"):
        for point in expand(load_suite(suite)):
            assert kind_of(point) is KINDS[point.kind]
            assert program_for(point).kind == point.kind


def test_an_unknown_kind_is_in_no_view():
    kind = kind_of("newer-kind")
    assert kind is UNKNOWN and kind_of(None) is UNKNOWN
    point = Point(name="x", group="g", endpoint="completions", timeout_s=1.0, prompt_tokens=8, output_tokens=2,
                  parallel=4, params=ClosedParams())
    assert kind.expected_requests(point) == 0 and kind.users(point) == 1 and kind.target_ci(point) is None
    assert kind.longest_request is None and point.longest_request() == 10  # a kind's own rule, else the lengths
    with pytest.raises(ValidationError):  # a point is of a kind this cardgen knows: its params say which
        Point(name="x", group="g", endpoint="completions", timeout_s=1.0, params={"kind": "newer-kind"})
    assert not (kind.sweep or kind.steady_window or kind.serving_load or kind.headlines)
    assert kind.diff_rank is None


@pytest.mark.parametrize("name,users,load", [("closed", 4, "4 parallel"), ("batch", 4, "4 parallel"),
                                             ("chat", 4, "4 parallel"), ("waves", 1, "waves up to 4"),
                                             ("open", 1, "2 req/s"), ("ingest", 1, "one at a time")])
def test_a_kinds_parallel_and_load_words(name, users, load):
    point = Point(name="x", group="g", endpoint="completions", timeout_s=1.0, parallel=4, params=kind_params()[name]())
    assert point.kind == name
    assert point.users() == users
    assert KINDS[name].load_words.format(parallel=4, rate="2 req/s") == load


# -- the rule: kinds are told apart only in the registry ----------------------------------------------------------

NAMES = frozenset(KINDS)


def _is_kind(node: ast.expr) -> bool:
    """A kind: a name ``kind``, an attribute ``.kind`` or a column ``["kind"]``."""
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return False


def _is_kind_name(node: ast.expr) -> bool:
    """A kind's name as a string, or a tuple, list or set of only such names."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_kind_name(e) for e in node.elts)
    return False


def _is_endpoint(node: ast.expr) -> bool:
    """An endpoint (``chat`` is an endpoint's name too): a name or attribute ``endpoint``."""
    return (isinstance(node, ast.Name) and node.id == "endpoint") or (isinstance(node, ast.Attribute)
                                                                      and node.attr == "endpoint")


def _kind_tests(source: str) -> list[int]:
    """The lines of ``source`` that compare a kind, or compare with a kind's name (``==``, ``!=``, ``in``,
    ``not in``; a loop ``for kind in ...`` too, as the grep of the issue counts it)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn)
                                                 for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(_is_kind(o) for o in operands) or (any(_is_kind_name(o) for o in operands)
                                                      and not any(_is_endpoint(o) for o in operands)):
                lines.append(node.lineno)
        elif isinstance(node, ast.For | ast.comprehension) and _is_kind(node.target):
            lines.append(node.target.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "isin" \
                and _is_kind(node.func.value) and node.args and _is_kind_name(node.args[0]):
            lines.append(node.lineno)
    return sorted(lines)


def kind_tests() -> dict[str, list[int]]:
    """Every module of the package with kind tests: its path under cardgen/ and their lines."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = _kind_tests(path.read_text("utf-8"))
        if found:
            out[path.relative_to(PACKAGE).as_posix()] = found
    return out


def test_the_scanner_sees_each_form():
    src = ('a = p.kind == "closed"\nb = kind in ("open", "batch")\nc = "waves" != x\nd = s["kind"] == y\n'
           'for kind in z: pass\ne = f["kind"].isin(["ingest"])\nok = kind_of(p).closed_loop\n'
           'ok2 = endpoint == "chat" or x in ("closed",) and y')
    assert _kind_tests(src) == [1, 2, 3, 4, 5, 6, 8]


def test_kinds_are_told_apart_only_in_the_registry_and_their_own_modules():
    found = kind_tests()
    outside = {path: lines for path, lines in found.items() if path not in KIND_MODULES}
    assert not outside, f"ask cardgen.kinds (kind_of(x).<trait>) instead of testing a kind's name: {outside}"
    assert sum(len(lines) for lines in found.values()) <= ALLOWED, found
