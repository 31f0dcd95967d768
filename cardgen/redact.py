"""Secrets never reach a log, a run directory, a card or the site: the one place that decides what a secret
looks like and masks it."""

from __future__ import annotations

import re

MASK = "***"
SECRET_FLAGS = ("--api-key", "--token", "--hf-token")

_SECRET_KEY = re.compile(r"(api_?key$|secret|password|(^|_)(hf|auth|access|bearer|api)_token$|^token$)",
                         re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """Whether a setting's name says its value is a secret (``api_key``, ``hf_token``, ``admin_api_key``...),
    not ``tokenizer`` or ``eos_token``."""
    return bool(_SECRET_KEY.search(str(key).replace("-", "_")))


def is_secret_flag(flag: str) -> bool:
    """Whether a flag or argument name says its value is a secret: ``--api-key``, ``--hf-token``,
    ``--admin-api-key``, ``--ssl-secret``, ``api_key``... (not ``--tokenizer`` or ``--max-num-batched-tokens``)."""
    name = str(flag).split("=", 1)[0]
    return name in SECRET_FLAGS or is_secret_key(name.lstrip("-"))


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the value of every secret-named flag replaced by ``***`` (``--x-api-key v`` and
    ``--x-api-key=v``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out
