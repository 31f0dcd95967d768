"""Reading and writing what ``cardgen diff`` needs of a run (the only I/O of the package).

:func:`load_sample` analyses a run directory afresh (:func:`cardgen.analysis.load_run`, through
:class:`~cardgen.rundir.RunDir`) and draws its digests from its requests, so the figures and their spreads come
from one analysis whatever cardgen wrote its files. :func:`write_digests` saves the digests as ``bootstrap.json``
when a run is rendered, and :func:`saved_sample` reads them back with ``summary.json``: how the site compares
hundreds of runs without reading their requests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cardgen.analysis import Analysis, analyse, load_run
from cardgen.diff import resample
from cardgen.diff.compute import DEFAULT_THRESHOLD, RunDiff, check_comparable, diff_samples
from cardgen.diff.sample import RunSample, bootstrap_digests, run_sample
from cardgen.errors import RunFileError
from cardgen.rundir import BOOTSTRAP_JSON, RunDir
from cardgen.schemas.bootstrap import BootstrapDigests
from cardgen.schemas.summary import Summary


def load_sample(run_dir: Path) -> RunSample:
    """One run directory, analysed, with its digests drawn from its requests. Raises
    :class:`~cardgen.errors.RunFileError` when it is not a readable run directory."""
    analysis = analyse(load_run(Path(run_dir), stream_requests=True))
    return run_sample(analysis.summary, bootstrap_digests(analysis), path=str(run_dir))


def _rounded(d: np.ndarray | None) -> list[float] | None:
    return None if d is None else [float(f"{x:.6g}") for x in d]


def write_digests(analysis: Analysis, run_dir: Path) -> Path:
    """Write ``bootstrap.json``: the bootstrap digest of every figure of the analysed run."""
    digests = BootstrapDigests(resamples=resample.RESAMPLES, levels=[float(x) for x in resample.LEVELS],
                               figures={k: _rounded(v) for k, v in bootstrap_digests(analysis).items()})
    return RunDir(run_dir).write_json(BOOTSTRAP_JSON, digests)


def saved_sample(run_dir: Path, summary: Summary) -> RunSample:
    """A run as its ``summary.json`` (``summary``) and ``bootstrap.json`` say, without its requests. A run with no
    usable ``bootstrap.json`` (rendered by an older cardgen, or with other quantile levels) has no intervals."""
    digests = None
    try:
        saved = RunDir(run_dir).load_bootstrap()
    except RunFileError:
        saved = None
    if saved is not None and np.allclose(saved.levels, resample.LEVELS):
        digests = {k: None if v is None else np.asarray(v, dtype=float) for k, v in saved.figures.items()}
    return run_sample(summary, digests, path=str(run_dir))


def diff_runs(run_a: Path, run_b: Path, *, threshold: float = DEFAULT_THRESHOLD,
              only_shared: bool = False) -> RunDiff:
    """Compare two run directories (refusing runs that are not comparable: see
    :func:`~cardgen.diff.compute.check_comparable`)."""
    a, b = load_sample(run_a), load_sample(run_b)
    check_comparable(a, b, only_shared=only_shared)
    return diff_samples(a, b, threshold=threshold)
