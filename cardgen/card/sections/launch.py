"""How the engine was started, when cardgen started it: its command, arguments and environment, secrets
masked."""

from __future__ import annotations

import json
import shlex
from typing import Any

from cardgen.card.table import TableView
from cardgen.redact import MASK, is_secret_env, is_secret_flag, redact_argv, redact_mapping
from cardgen.schemas.run import RunInfo

_LAUNCH_SKIP = {"pid", "log", "started_unix", "url", "host", "port", "server_reported"}  # machine-local details
_LAUNCH_FIRST = ("engine", "engine_version", "command")


def _argv_rows(args: list[str]) -> list[list[str]]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` pairs of an (already redacted) argument list."""
    rows, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and "=" in arg:
            rows.append(list(arg.split("=", 1)))
        elif arg.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            rows.append([arg, args[i + 1]])
            i += 1
        else:
            rows.append([arg, "true"] if arg.startswith("-") else ["(positional)", arg])
        i += 1
    return rows


def _masked(name: str, value: Any) -> str:
    """``value`` as text, masked when ``name`` says it is a secret or when it looks like one (a bare flag or an
    unset value is shown)."""
    if isinstance(value, bool) or value is None or value == "":
        return _plain(value)
    return MASK if is_secret_flag(name) else _plain(redact_mapping(value))


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def launch_table(info: RunInfo) -> TableView | None:
    """How the engine was started, when cardgen started it: its arguments (as a model card's parameter table),
    the command, the version and the recorded environment. Secret flags and variables are masked again."""
    if info.server.launch is None:
        return None
    launch = info.server.launch.model_dump(exclude_unset=True)
    if not launch:
        return None
    rows: list[list[str]] = []
    keys = [k for k in _LAUNCH_FIRST if k in launch] + [k for k in launch if k not in _LAUNCH_FIRST]
    for key in keys:
        value = launch[key]
        if key in _LAUNCH_SKIP:
            continue
        if key == "command" and isinstance(value, list):
            rows.append(["command", shlex.join(redact_argv([str(v) for v in value]))])
        elif key == "arguments" and isinstance(value, dict):
            for k, v in value.items():
                flag = f"--{str(k).replace('_', '-')}" if k != "positional" else "positional"
                rows.append([flag, _masked(flag, v)])
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            if key != "engine_args" or "arguments" not in launch:  # the same arguments, already shown
                rows += _argv_rows(redact_argv(value))
        elif isinstance(value, dict):
            rows += [[f"{key} {k}", MASK if is_secret_env(str(k)) else _masked(str(k), v)] for k, v in value.items()]
        else:
            rows.append([str(key), _masked(str(key), value)])
    return TableView(["Argument", "Value"], rows, ["l", "l"])
