"""Benchmark suites: YAML files that declare scenarios; built-in ones ship in ``cardgen/suites/``.

A suite is a list of scenario entries, each a kind's (its module in :mod:`cardgen.kinds` owns its schema and
what it expands into: ``point_fields``). Each entry expands into *points* (one point = one run of the load
engine with fixed parameters, e.g. the closed loop at 10 parallel users), executed in order.

Input models forbid unknown keys, so a typo in a suite file is an error that names the key.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cardgen.errors import UsageError
from cardgen.kinds import BROKEN, KINDS, Scenario
from cardgen.kinds.entry import Endpoint

BUILTIN_SUITES = ("quick", "standard", "full", "sharegpt", "workloads")


class Suite(BaseModel):
    """A named list of scenarios."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    endpoint: Endpoint = "completions"
    timeout_s: float = Field(default=300.0, gt=0)
    scenarios: list[Scenario] = Field(min_length=1)


def _format_validation_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in KINDS))
    if first["type"] == "extra_forbidden":
        return f"{source}: unknown key '{where}'; remove it or fix its spelling"
    if first["type"] == "union_tag_invalid":
        tag = first.get("ctx", {}).get("tag", "?")
        broken = f" ({BROKEN[tag]})" if tag in BROKEN else ""
        return (f"{source}: {where}: no installed kind is named '{tag}'{broken}; installed: {', '.join(KINDS)} "
                "('cardgen kinds' lists them)")
    return f"{source}: {where or 'suite'}: {first['msg']}"


def parse_suite(text: str, *, source: str = "suite") -> Suite:
    """Parse YAML text into a :class:`Suite`; any problem is a one-line :class:`UsageError`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{source} is not valid YAML{at}: fix its syntax") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source} must be a YAML mapping with 'name' and 'scenarios'")
    try:
        return Suite.model_validate(data)
    except ValidationError as err:
        raise UsageError(_format_validation_error(err, source)) from None


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name (``quick``, ``standard``, ``full``) or a YAML file by path."""
    if name_or_path in BUILTIN_SUITES:
        text = resources.files("cardgen.suites").joinpath(f"{name_or_path}.yaml").read_text("utf-8")
        return parse_suite(text, source=f"built-in suite '{name_or_path}'")
    path = Path(name_or_path)
    if path.suffix.lower() not in (".yaml", ".yml") and not path.exists():
        raise UsageError(f"unknown suite '{name_or_path}': use one of {', '.join(BUILTIN_SUITES)} or a .yaml file")
    if not path.is_file():
        raise UsageError(f"suite file '{name_or_path}' does not exist")
    return parse_suite(path.read_text("utf-8"), source=str(path))
