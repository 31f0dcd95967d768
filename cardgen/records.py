"""Moved: the line models are in :mod:`cardgen.schemas.records`, reading JSON-lines in :mod:`cardgen.rundir`.
Re-exported here for the modules that still import them from here."""

from cardgen.rundir import read_jsonl
from cardgen.schemas.records import ErrorKind, LoadgenSample, MetricSample, RequestRecord

__all__ = ["ErrorKind", "LoadgenSample", "MetricSample", "RequestRecord", "read_jsonl"]
