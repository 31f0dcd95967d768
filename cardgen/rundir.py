"""The run directory: the one place where the file names of a run are defined.

Stages talk through these files: load writes ``run.json``, ``requests.jsonl``, ``server_metrics.jsonl`` and
``loadgen.jsonl``; analysis writes ``summary.json`` and ``tables/``; figures go to ``figures/``; the card is
``README.md``.
"""

from __future__ import annotations

import datetime as _dt
import re
import unicodedata
from pathlib import Path

RUN_JSON = "run.json"
REQUESTS_JSONL = "requests.jsonl"
SERVER_METRICS_JSONL = "server_metrics.jsonl"
LOADGEN_JSONL = "loadgen.jsonl"
GPU_METRICS_JSONL = "gpu_metrics.jsonl"
SERVER_LOG = "server.log"
SUMMARY_JSON = "summary.json"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
CARD_MD = "README.md"

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")


def slugify(name: str, *, max_len: int = 80) -> str:
    """A file-system safe, lower-case slug for any model or GPU name (``org/Model:v1`` -> ``org--model-v1``).

    Never empty, never ``.`` or ``..``, never longer than ``max_len``.
    """
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    text = text.replace("/", "--")
    text = _SLUG_BAD.sub("-", text).strip("-.")
    text = re.sub(r"-{3,}", "--", text)[:max_len].strip("-.")
    return text or "model"


def utc_stamp(when: _dt.datetime | None = None) -> str:
    """A sortable UTC timestamp usable as a directory name: ``20261121T195700Z``."""
    when = when or _dt.datetime.now(_dt.UTC)
    return when.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def default_run_dir(model: str, *, root: Path = Path("runs"), when: _dt.datetime | None = None) -> Path:
    """``runs/<model-slug>/<UTC timestamp>/``: not created here."""
    return root / slugify(model) / utc_stamp(when)
