"""``cardgen diff``: two runs figure by figure, with the significance of every ratio.

    load.py (read and analyse each run) → sample.py (its figures and each one's bootstrap digest, resample.py)
    → compute.py (B / A, its interval, a verdict) → format.py (text, JSON)

Everything but ``load.py`` is pure. A rendered run keeps its digests in ``bootstrap.json``
(:func:`write_digests`), so the site compares runs with the same code from their summaries alone
(:func:`saved_sample`).
"""

from cardgen.diff.compute import (
    CANNOT_TELL,
    DEFAULT_THRESHOLD,
    FASTER,
    LARGER,
    NO_CHANGE,
    NO_SIGNIFICANT_CHANGE,
    SLOWER,
    SMALLER,
    FigureDiff,
    PointDiff,
    RunDiff,
    check_comparable,
    diff_samples,
    figure_diff,
)
from cardgen.diff.format import diff_json, format_diff, format_json
from cardgen.diff.load import diff_runs, load_sample, saved_sample, write_digests
from cardgen.diff.sample import RunSample, bootstrap_digests, run_sample

__all__ = ["CANNOT_TELL", "DEFAULT_THRESHOLD", "FASTER", "LARGER", "NO_CHANGE", "NO_SIGNIFICANT_CHANGE", "SLOWER",
           "SMALLER", "FigureDiff", "PointDiff", "RunDiff", "RunSample", "bootstrap_digests", "check_comparable",
           "diff_json", "diff_runs", "diff_samples", "figure_diff", "format_diff", "format_json", "load_sample",
           "run_sample", "saved_sample", "write_digests"]
