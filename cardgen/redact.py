"""Secrets never reach a log, a run directory, a card or the site: the one place that decides what a secret
looks like and masks it.

Three kinds of name say their value is a secret, each with its rule:

- a flag or a setting (``--api-key``, ``hf_token``): :func:`is_secret_flag` / :func:`is_secret_key`, by the
  shape of the name, so that ``--tokenizer`` or ``eos_token`` stay readable;
- an environment variable (``VLLM_API_KEY``, ``SGLANG_AUTH_TOKEN``): :func:`is_secret_env`, stricter, any name
  holding TOKEN, KEY, SECRET or PASSWORD (an environment is only recorded, never needed to rerun);
- and a value that looks like a credential whatever it is called (``hf_...`` tokens, ``sk-...`` keys):
  :func:`looks_secret`.

A command line is masked by :func:`redact_argv`, which also masks the command lines nested in one argument
(``--engine-args "--api-key k"``); a mapping by :func:`redact_mapping`; the text an engine prints by
:func:`scrub`, given the values :func:`secret_values` found in its command line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
SECRET_FLAGS = ("--api-key", "--token", "--hf-token")
SECRET_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
MIN_SCRUBBED = 4

_SECRET_KEY = re.compile(r"(api_?key$|secret|password|(^|_)(hf|auth|access|bearer|api)_token$|^token$)",
                         re.IGNORECASE)
# Hugging Face user access tokens and OpenAI-style API keys, whatever flag or variable carries them
_SECRET_VALUE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,})\b")


def is_secret_key(key: str) -> bool:
    """Whether a setting's name says its value is a secret (``api_key``, ``hf_token``, ``admin_api_key``...),
    not ``tokenizer`` or ``eos_token``."""
    return bool(_SECRET_KEY.search(str(key).replace("-", "_")))


def is_secret_flag(flag: str) -> bool:
    """Whether a flag or argument name says its value is a secret: ``--api-key``, ``--hf-token``,
    ``--admin-api-key``, ``--ssl-secret``, ``api_key``... (not ``--tokenizer`` or ``--max-num-batched-tokens``)."""
    name = str(flag).split("=", 1)[0]
    return name in SECRET_FLAGS or is_secret_key(name.lstrip("-"))


def is_secret_env(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret: any name a flag's rule would call
    secret, and any holding TOKEN, KEY, SECRET or PASSWORD (``VLLM_S3_ACCESS_KEY_ID``, ``HF_TOKEN_PATH``)."""
    return is_secret_key(name) or any(w in str(name).upper() for w in SECRET_ENV_WORDS)


def looks_secret(value: str) -> bool:
    """Whether a value has the shape of a credential (``hf_`` + 20 or more letters and digits, ``sk-...``)."""
    return bool(_SECRET_VALUE.search(str(value)))


def _nested(arg: str) -> bool:
    """Whether an argument is itself a command line (``--engine-args "--api-key k --enforce-eager"``)."""
    return " " in arg and any(part.startswith("-") for part in arg.split())


def _inner(value: str) -> list[str] | None:
    """The command line a value holds (``--engine-args=--api-key=k``, ``--engine-args="--api-key k"``), if any."""
    if not (_nested(value) or value.startswith("-")):
        return None
    try:
        return shlex.split(value)
    except ValueError:  # unbalanced quotes: not a command line after all
        return None


def _redact_value(value: str) -> str:
    inner = _inner(value)
    if inner is not None:
        masked = redact_argv(inner)
        return value if masked == inner else shlex.join(masked)
    return _SECRET_VALUE.sub(MASK, value)


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the value of every secret-named flag replaced by ``***`` (``--x-api-key v`` and
    ``--x-api-key=v``), every value shaped like a credential masked, and the same done inside arguments that
    are command lines themselves (``--engine-args "--api-key v"``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, value = arg.partition("=")
        if not flag.startswith("-") or " " in flag:  # a value, a positional word, or a whole command line
            out.append(_redact_value(arg))
        elif is_secret_flag(flag):
            out.append(f"{flag}={MASK}" if eq else arg)
            hide_next = not eq
        else:
            out.append(f"{flag}={_redact_value(value)}" if eq else arg)
    return out


def secret_values(argv: list[str]) -> list[str]:
    """The values :func:`redact_argv` masks in ``argv``, longest first, to scrub them from what the program
    prints. Values under :data:`MIN_SCRUBBED` characters are left out: replacing every ``x`` of a log would
    destroy it, and so short a value guards nothing."""
    found: list[str] = []

    def walk(args: list[str]) -> None:
        for arg, shown in zip(args, redact_argv(args), strict=True):
            if arg == shown:
                continue
            flag, eq, value = arg.partition("=")
            if shown in (MASK, f"{flag}={MASK}"):
                found.append(value if eq and shown != MASK else arg)
                continue
            inner = _inner(value if eq and flag.startswith("-") and " " not in flag else arg)
            if inner is not None:
                walk(inner)
            else:
                found.extend(_SECRET_VALUE.findall(arg))

    walk(list(argv))
    return sorted({v for v in found if len(v) >= MIN_SCRUBBED}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` and anything shaped like a credential replaced by ``***``."""
    for value in secrets:
        text = text.replace(value, MASK)
    return _SECRET_VALUE.sub(MASK, text)


def redact_mapping(data: Any) -> Any:
    """A copy of ``data`` with the value of every key that names a secret (``api_key``, ``hf_token``...)
    replaced by ``***`` when it is set, and every string shaped like a credential masked. Servers echo their
    own arguments (SGLang's ``/server_info``, vLLM's ``non-default args``)."""
    if isinstance(data, Mapping):
        out = {}
        for key, value in data.items():
            secret = is_secret_key(str(key))
            out[key] = MASK if secret and value not in (None, "", False) else redact_mapping(value)
        return out
    if isinstance(data, list):
        return [redact_mapping(v) for v in data]
    if isinstance(data, str) and looks_secret(data):
        return MASK
    return data
