"""``run.json`` for the load stage: :func:`save_run_info` (atomic, signed by the writing process) and
:func:`load_run_info`, both :class:`~cardgen.rundir.RunDir`'s. The schema is :mod:`cardgen.schemas.run`; its
names are re-exported here for the modules that still import them from here."""

from __future__ import annotations

from pathlib import Path

from cardgen.redact import SECRET_FLAGS, redact_argv  # noqa: F401  (re-exported)
from cardgen.rundir import RunDir
from cardgen.schemas.run import RUN_SCHEMA_VERSION, RunInfo, ServerInfo  # noqa: F401  (re-exported)


def save_run_info(run_dir: Path, info: RunInfo) -> None:
    """Write ``run_dir/run.json`` atomically; while ``running``, this process signs it as the writer (and
    saving again is the heartbeat)."""
    RunDir(run_dir).save_run_info(info)


def load_run_info(run_dir: Path) -> RunInfo:
    """``run_dir/run.json``, version-checked, with its effective status (see :meth:`RunDir.load_run_info`)."""
    return RunDir(run_dir).load_run_info()
