"""Gathering runs for the site: every directory under a root that holds ``summary.json`` and ``README.md``."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from cardgen.analysis.summary import Summary
from cardgen.rundir import CARD_MD, SUMMARY_JSON

STAMP = re.compile(r"^(\d{8})T(\d{6})Z$")  # a run directory named by rundir.utc_stamp


@dataclass(frozen=True)
class SiteRun:
    """One run as the site sees it: where it is, its summary and its card's Markdown."""

    run_dir: Path
    rel: PurePosixPath  # the run directory relative to the gathered root ("." when the root is the run)
    summary: Summary
    card: str

    @property
    def started_at(self) -> str | None:
        """ISO 8601 UTC start of the run: from summary.json, else from a ``20261121T195700Z`` dir name."""
        if self.summary.started_at:
            return self.summary.started_at
        match = STAMP.match(self.run_dir.name)
        if match:
            when = _dt.datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S")
            return when.replace(tzinfo=_dt.UTC).isoformat()
        return None

    @property
    def sort_key(self) -> tuple[str, str]:
        return (self.started_at or "", str(self.rel))


@dataclass(frozen=True)
class Gathered:
    runs: list[SiteRun]
    skipped: list[str]  # one line per directory that looked like a run but could not be read


def run_files(run_dir: Path, sub: str = "") -> list[str]:
    """Files under ``run_dir/sub`` (``""``: the whole run) as sorted run-relative POSIX paths.

    Hidden files and symbolic links that lead out of the run directory are left out: never copied or uploaded.
    """
    root = Path(run_dir).resolve()
    base = Path(run_dir) / sub
    if not base.is_dir():
        return []
    found = []
    for path in base.rglob("*"):
        rel = path.relative_to(run_dir)
        if (
            path.is_file()
            and not any(p.startswith(".") for p in rel.parts)
            and path.resolve().is_relative_to(root)
        ):
            found.append(rel.as_posix())
    return sorted(found)


def load_run(run_dir: Path, rel: PurePosixPath) -> SiteRun:
    """Read one run directory; raises ``ValueError`` with a short reason when it cannot be shown."""
    summary_path = run_dir / SUMMARY_JSON
    card_path = run_dir / CARD_MD
    if not card_path.is_file():
        raise ValueError(f"no {CARD_MD} (the card): render it with 'cardgen render {run_dir}'")
    try:
        data = json.loads(summary_path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{SUMMARY_JSON} is not readable JSON ({type(exc).__name__})") from None
    try:
        summary = Summary.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "summary"
        raise ValueError(f"{SUMMARY_JSON}: {where}: {first['msg']}") from None
    try:
        card = card_path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{CARD_MD} is not readable UTF-8 text ({type(exc).__name__})") from None
    return SiteRun(run_dir=run_dir, rel=rel, summary=summary, card=card)


def gather_runs(root: Path) -> Gathered:
    """Every run under ``root`` at any depth (a run's own subfolders are not searched), oldest first.

    Hidden directories and symbolic links to directories are not followed. A directory with ``summary.json``
    that cannot be read is skipped with a reason in ``skipped``.
    """
    root = Path(root)
    runs: list[SiteRun] = []
    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if SUMMARY_JSON not in filenames:
            continue
        dirnames[:] = []
        run_dir = Path(dirpath)
        rel = PurePosixPath(run_dir.relative_to(root).as_posix())
        try:
            runs.append(load_run(run_dir, rel))
        except ValueError as exc:
            skipped.append(f"skipping {run_dir}: {exc}")
    runs.sort(key=lambda r: r.sort_key)
    return Gathered(runs=runs, skipped=skipped)
