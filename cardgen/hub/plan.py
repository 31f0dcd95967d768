"""What a push uploads, decided before anything is sent (so ``--dry-run`` shows exactly what a push would do).

A card goes into a model repo under a subfolder (``perf/<gpu-slug>/`` by default) with the files it links,
keeping the run directory's layout so ``figures/x.png`` still resolves next to it. A run goes into a dataset
repo under ``runs/<model-slug>/<stamp>/``, the layout ``cardgen site --from-hub`` reads back.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cardgen.errors import UsageError
from cardgen.rundir import (
    CARD_MD,
    FIGURES_DIR,
    RUN_JSON,
    STAMP,
    SUMMARY_JSON,
    TABLES_DIR,
    RunDir,
    slugify,
    utc_stamp,
)
from cardgen.schemas import Summary
from cardgen.site.mdtext import localize_links

DATASET_ROOT = "runs"
#: run.json fields that describe the machine that ran the load, not the run: left out of a published copy
WRITER_FIELDS = ("pid", "hostname", "heartbeat_unix")
CARD_DIRS = (FIGURES_DIR, TABLES_DIR)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Upload:
    path_in_repo: str
    local_path: Path
    size: int
    data: bytes | None = None  # what is sent instead of the file's bytes (a published copy)


@dataclass(frozen=True)
class PushPlan:
    repo_id: str
    repo_type: str  # "model" | "dataset"
    uploads: list[Upload]
    commit_message: str
    create_pr: bool
    warnings: tuple[str, ...] = ()


def check_repo_id(repo_id: str, *, flag: str) -> str:
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise UsageError(f"{flag} must look like ORG/NAME, got '{repo_id}'")
    return repo_id


def card_folder(path_in_repo: str | None, summary: Summary) -> str:
    """The subfolder that receives the card: ``perf/<gpu-slug>`` unless given; never the repo's root."""
    if path_in_repo is None:
        return f"perf/{slugify(summary.gpu or 'unknown-gpu')}"
    text = path_in_repo.strip().strip("/")
    parts = PurePosixPath(text).parts
    if not parts or "\\" in text or any(p in (".", "..") for p in parts):
        raise UsageError(
            f"--path-in-repo must be a subfolder such as perf/a100, got '{path_in_repo}' (the card "
            "never replaces the repo's own README.md)"
        )
    return "/".join(parts)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _uploads(run_dir: Path, rels: list[str], folder: str) -> list[Upload]:
    return [Upload(f"{folder}/{rel}", run_dir / rel, (run_dir / rel).stat().st_size) for rel in rels]


def card_plan(
    run_dir: Path, summary: Summary, card: str, *, repo_id: str, path_in_repo: str | None, create_pr: bool
) -> PushPlan:
    """The card, its figures and tables, summary.json and any other run file the card links to."""
    folder = card_folder(path_in_repo, summary)
    linked = localize_links(card, run_dir)
    rels = {CARD_MD, *linked.files}
    rels |= {SUMMARY_JSON} if (run_dir / SUMMARY_JSON).is_file() else set()
    for sub in CARD_DIRS:
        rels.update(RunDir(run_dir).files(sub))
    kind = "modelled" if summary.modelled else "measured"
    message = _one_line(
        f"cardgen: {kind} performance card for {summary.model} on {summary.gpu or 'unknown GPU'}"
    )
    return PushPlan(
        repo_id=repo_id,
        repo_type="model",
        uploads=_uploads(run_dir, sorted(rels), folder),
        commit_message=message,
        create_pr=create_pr,
        warnings=tuple(linked.problems),
    )


def run_stamp(run_dir: Path, summary: Summary) -> str:
    """The run's ``20261121T195700Z`` stamp: its directory name when it is one, else from ``started_at``."""
    if STAMP.match(run_dir.name):
        return run_dir.name
    if summary.started_at:
        try:
            return utc_stamp(_dt.datetime.fromisoformat(summary.started_at.replace("Z", "+00:00")))
        except ValueError:
            pass
    return slugify(run_dir.resolve().name)


def published_run_json(path: Path) -> bytes:
    """``run.json`` as a dataset publishes it: without :data:`WRITER_FIELDS` (the load machine's host name and
    process, which only tell a live run from a dead one on that machine)."""
    data = json.loads(path.read_text("utf-8"))
    for name in WRITER_FIELDS:
        data.pop(name, None)
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def dataset_plan(run_dir: Path, summary: Summary, *, repo_id: str, create_pr: bool) -> PushPlan:
    """Every file of the run directory (hidden files left out) under ``runs/<model-slug>/<stamp>/``, run.json
    as :func:`published_run_json` makes it."""
    folder = f"{DATASET_ROOT}/{slugify(summary.model)}/{run_stamp(run_dir, summary)}"
    rels = RunDir(run_dir).files()
    message = _one_line(f"cardgen: run of {summary.model} on {summary.gpu or 'unknown GPU'} ({folder})")
    uploads = []
    for upload in _uploads(run_dir, rels, folder):
        if upload.local_path.name == RUN_JSON and upload.local_path.parent == run_dir:
            data = published_run_json(upload.local_path)
            upload = Upload(upload.path_in_repo, upload.local_path, len(data), data)
        uploads.append(upload)
    return PushPlan(
        repo_id=repo_id,
        repo_type="dataset",
        uploads=uploads,
        commit_message=message,
        create_pr=create_pr,
    )


def format_plan(plan: PushPlan, *, dry_run: bool) -> str:
    """What a push sends, one file a line."""
    how = "as a pull request" if plan.create_pr else "as a commit to main"
    verb = "Would upload" if dry_run else "Uploading"
    total = sum(u.size for u in plan.uploads)
    lines = [
        f"{verb} {len(plan.uploads)} files ({total:,} bytes) to {plan.repo_type} repo {plan.repo_id} {how}:"
    ]
    lines += [f"  {u.path_in_repo}  ({u.size:,} bytes)" for u in plan.uploads]
    lines.append(f"  commit message: {plan.commit_message}")
    return "\n".join(lines)
