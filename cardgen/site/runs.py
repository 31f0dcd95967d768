"""Gathering runs for the site: every directory under a root that holds ``summary.json`` and ``README.md``, read
through :class:`~cardgen.rundir.RunDir`."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cardgen.errors import RunFileError
from cardgen.rundir import STAMP, SUMMARY_JSON, RunDir
from cardgen.schemas import Summary


@dataclass(frozen=True)
class SiteRun:
    """One run as the site sees it: where it is, its summary, its card's Markdown and its status now."""

    run_dir: Path
    rel: PurePosixPath  # the run directory relative to the gathered root ("." when the root is the run)
    summary: Summary
    card: str
    status: str | None = None  # run.json's effective status (a killed run reads "died"), else the summary's

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


def load_run(run_dir: Path, rel: PurePosixPath) -> SiteRun:
    """Read one run directory; raises :class:`~cardgen.errors.RunFileError` (one line) when it cannot be shown.

    ``run.json`` only adds the status: a run without one, or with one this cardgen cannot read, is shown with
    the status its summary recorded."""
    rd = RunDir(run_dir)
    card = rd.load_card()
    summary = rd.load_summary()
    try:
        status: str | None = rd.load_run_info().status
    except RunFileError:
        status = summary.run_status
    return SiteRun(run_dir=run_dir, rel=rel, summary=summary, card=card, status=status)


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
        except RunFileError as exc:
            skipped.append(f"skipping: {exc}")
    runs.sort(key=lambda r: r.sort_key)
    return Gathered(runs=runs, skipped=skipped)
