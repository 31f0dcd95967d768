"""Analysis: pure functions from a run's raw records to ``summary.json`` and ``tables/``.

``load_run`` reads a run directory, ``analyse`` turns it into an :class:`Analysis` (summary, per-request rows,
server time series, ingestion fit, tables), ``write_analysis`` writes ``tables/`` and ``summary.json``.
"""

from cardgen.analysis.analyse import Analysis, analyse, write_analysis
from cardgen.analysis.options import AnalysisOptions
from cardgen.analysis.rundata import RunData, load_run
from cardgen.schemas.summary import SUMMARY_SCHEMA_VERSION, Summary

__all__ = ["SUMMARY_SCHEMA_VERSION", "Analysis", "AnalysisOptions", "RunData", "Summary", "analyse", "load_run",
           "write_analysis"]
