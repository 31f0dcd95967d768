"""Production traces a suite replays (``kind: open`` with a trace as its ``dataset:`` and no ``rates``): when each
request came, how long its prompt and its answer were, and, for Mooncake, which prompt blocks it shared with
earlier requests.

Formats, recognised from their columns (an unknown one is a one-line error):

- **Mooncake** JSONL (the FAST '25 traces): ``{"timestamp": ms, "input_length": tokens, "output_length": tokens,
  "hash_ids": [...]}``; each hash id names a block of 512 prompt tokens, so two requests that start with the same
  ids share that prefix (:data:`MOONCAKE_BLOCK_TOKENS`);
- **Azure** LLM inference CSV (AzurePublicDataset 2023 / 2024): ``TIMESTAMP`` (a date and time), ``ContextTokens``,
  ``GeneratedTokens``;
- **BurstGPT** CSV: ``Timestamp`` (seconds), ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``,
  ``Log Type``; a row with no response token (a failed request in the log) has nothing to replay and is left out.

Offsets are seconds from the trace's first request, in time order. The sample traces cardgen ships
(:data:`SAMPLES`, made by :mod:`cardgen.traces.samples`, not copied) replay as ``dataset: mooncake-sample``,
``azure-sample`` or ``burstgpt-sample``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path

from cardgen.errors import UsageError
from cardgen.kinds.entry import TRACE_SAMPLES as SAMPLES

MOONCAKE_BLOCK_TOKENS = 512  # the tokens one Mooncake hash id stands for
FORMATS = ("Mooncake JSONL (timestamp, input_length, output_length, hash_ids)",
           "Azure CSV (TIMESTAMP, ContextTokens, GeneratedTokens)",
           "BurstGPT CSV (Timestamp, Request tokens, Response tokens)")
_MOONCAKE = {"timestamp", "input_length", "output_length"}
_AZURE = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
_BURSTGPT = {"Timestamp", "Request tokens", "Response tokens"}
_EPOCH = datetime(2000, 1, 1)


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when (seconds after the first), its lengths, and its prompt's block ids."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A trace's requests in time order, its format, the tokens a hash id stands for (0: none), and how many of
    its lines had nothing to replay."""

    format: str  # mooncake | azure | burstgpt
    requests: tuple[TraceRequest, ...]
    block_tokens: int = 0
    left_out: int = 0

    @property
    def duration_s(self) -> float:
        return self.requests[-1].offset_s if self.requests else 0.0


def source_path(source: str) -> Path:
    """The file a dataset name means: a shipped sample's, or the path itself."""
    if source in SAMPLES:
        return Path(str(resources.files("cardgen.traces").joinpath("data", SAMPLES[source])))
    return Path(source)


def describe(source: str) -> str:
    """A trace's name for a card: the sample's name, or the file's."""
    return source if source in SAMPLES else Path(source).name


def _unknown(path: Path, columns: object) -> UsageError:
    return UsageError(f"{path}: not a trace cardgen knows (columns {columns}): use {'; '.join(FORMATS)}")


def _int(value: object, where: str) -> int:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UsageError(f"{where}: {value!r} is not a number of tokens") from None
    if number != int(number) or number < 0:
        raise UsageError(f"{where}: {value!r} is not a whole number of tokens")
    return int(number)


def _ordered(fmt: str, rows: list[tuple[float, int, int, tuple[int, ...]]], *, block: int = 0,
             left_out: int = 0) -> Trace:
    rows.sort(key=lambda r: r[0])
    first = rows[0][0]
    return Trace(fmt, tuple(TraceRequest(t - first, i, o, h) for t, i, o, h in rows), block_tokens=block,
                 left_out=left_out)


def json_lines(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """Each non-blank line of a JSON-lines file a user gave, parsed, with its number; a line that is not JSON is a
    one-line UsageError."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError:
            raise UsageError(f"{path}: line {n} is not JSON") from None


def _mooncake(path: Path, text: str) -> Trace:
    rows, skipped = [], 0
    for n, item in json_lines(path, text):
        if not isinstance(item, dict) or not _MOONCAKE <= set(item):
            raise UsageError(f"{path}: line {n} lacks {', '.join(sorted(_MOONCAKE - set(item if isinstance(item, dict) else ())))} "
                             "(a Mooncake trace line has timestamp, input_length, output_length, hash_ids)")
        where = f"{path}: line {n}"
        inp, out = _int(item["input_length"], where), _int(item["output_length"], where)
        ids = item.get("hash_ids") or []
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise UsageError(f"{where}: hash_ids must be a list of integers")
        if inp < 1 or out < 1:
            skipped += 1
            continue
        rows.append((float(item["timestamp"]) / 1000.0, inp, out, tuple(ids)))
    if not rows:
        raise UsageError(f"{path}: the trace has no request to replay")
    return _ordered("mooncake", rows, block=MOONCAKE_BLOCK_TOKENS, left_out=skipped)


def _azure_time(text: str, where: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (seven fractional digits: more than ``fromisoformat`` reads) as seconds
    since 2000 (small enough for a float to keep its tenths of a microsecond)."""
    head, _, frac = text.strip().partition(".")
    try:
        base = datetime.fromisoformat(head).replace(tzinfo=None)
    except ValueError:
        raise UsageError(f"{where}: TIMESTAMP {text!r} is not a date and time") from None
    return (base - _EPOCH).total_seconds() + (float(f"0.{frac}") if frac.isdigit() else 0.0)


def _csv(path: Path, text: str) -> Trace:
    reader = csv.DictReader(io.StringIO(text))
    columns = {c.strip() for c in reader.fieldnames or ()}
    if _AZURE <= columns:
        fmt, when, inp, out = "azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens"
    elif _BURSTGPT <= columns:
        fmt, when, inp, out = "burstgpt", "Timestamp", "Request tokens", "Response tokens"
    else:
        raise _unknown(path, ", ".join(sorted(columns)) or "none")
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    skipped = 0
    for n, row in enumerate(reader, start=2):
        row = {k.strip(): v for k, v in row.items() if k is not None}
        where = f"{path}: line {n}"
        i, o = _int(row[inp], where), _int(row[out], where)
        if i < 1 or o < 1:  # BurstGPT logs failed requests with no response: nothing to replay
            skipped += 1
            continue
        t = _azure_time(row[when], where) if fmt == "azure" else float(row[when])
        rows.append((t, i, o, ()))
    if not rows:
        raise UsageError(f"{path}: the trace has no request to replay")
    return _ordered(fmt, rows, left_out=skipped)


def is_trace(source: str) -> bool:
    """Whether ``source`` names a trace (a shipped sample, a .csv, or a .jsonl of Mooncake lines) rather than a
    dataset of prompts; reads the first line of a .jsonl."""
    if source in SAMPLES or source.lower().endswith(".csv"):
        return True
    path = Path(source)
    if path.suffix.lower() != ".jsonl" or not path.is_file():
        return False
    with path.open(encoding="utf-8") as fh:
        first = next((line for line in fh if line.strip()), "")
    try:
        item = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(item, dict) and _MOONCAKE <= set(item)


@lru_cache(maxsize=8)
def read_trace(source: str) -> Trace:
    """The trace ``source`` names (a shipped sample or a file), recognised from its columns; a one-line
    UsageError for a missing file or an unknown format."""
    path = source_path(source)
    if not path.is_file():
        raise UsageError(f"trace file '{source}' does not exist")
    text = path.read_text("utf-8")
    if path.suffix.lower() == ".jsonl":
        return _mooncake(path, text)
    if path.suffix.lower() == ".csv":
        return _csv(path, text)
    raise _unknown(path, "unknown: not .jsonl or .csv")
