"""Every file cardgen saves, as pydantic models: pure data, no I/O (reading and writing is
:class:`cardgen.rundir.RunDir`'s).

    file                   model                                    version
    run.json               run.RunInfo (with run.ServerInfo)        RUN_SCHEMA_VERSION
    requests.jsonl         records.RequestRecord, a line each       } versioned by run.json, written by the
    server_metrics.jsonl   records.MetricSample, a line each        } same load stage
    loadgen.jsonl          records.LoadgenSample, a line each       }
    summary.json           summary.Summary                          SUMMARY_SCHEMA_VERSION
    bootstrap.json         bootstrap.BootstrapDigests               BOOTSTRAP_SCHEMA_VERSION
    gpu_metrics.jsonl      plain records of cardgen.gpu's sampler   versioned by run.json

Saved models ignore unknown fields, so a file from a newer cardgen that only added fields still loads. A change
an older cardgen would misread bumps the version; ``RunDir`` refuses a version newer than it knows, in one line.
Input models (a suite file, the command line) are the opposite: they forbid unknown fields, so typos fail.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cardgen.schemas.records import ErrorKind, LoadgenSample, MetricSample, RequestRecord
    from cardgen.schemas.run import RUN_SCHEMA_VERSION, PointOutcome, RunInfo, ServerInfo
    from cardgen.schemas.saved import Saved
    from cardgen.schemas.summary import SUMMARY_SCHEMA_VERSION, Summary

# each name's module, imported on first use: a process that needs one file's model (the scraper's MetricSample)
# does not build every model of the run directory and the suite behind them (about 0.6 s)
_HOMES = {
    "ErrorKind": "records", "LoadgenSample": "records", "MetricSample": "records", "RequestRecord": "records",
    "RUN_SCHEMA_VERSION": "run", "PointOutcome": "run", "RunInfo": "run", "ServerInfo": "run",
    "Saved": "saved", "SUMMARY_SCHEMA_VERSION": "summary", "Summary": "summary",
}

__all__ = ["RUN_SCHEMA_VERSION", "SUMMARY_SCHEMA_VERSION", "ErrorKind", "LoadgenSample",
           "MetricSample", "PointOutcome", "RequestRecord", "RunInfo", "Saved", "ServerInfo", "Summary"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
