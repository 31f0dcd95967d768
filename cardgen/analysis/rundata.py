"""Reading a run directory (the only I/O of the analysis): ``run.json`` and the JSON-lines files, through
:class:`~cardgen.rundir.RunDir`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cardgen.rundir import (
    GPU_METRICS_JSONL,
    LOADGEN_JSONL,
    PREDICTED_JSONL,
    PREDICTED_METRICS_JSONL,
    REQUESTS_JSONL,
    SERVER_METRICS_JSONL,
    RunDir,
)
from cardgen.schemas import LoadgenSample, MetricSample, RequestRecord, RunInfo

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StoredRecords:
    """A run's request records as they are on disk, read afresh each time they are iterated
    (:meth:`cardgen.rundir.RunDir.stream_records`): a long run's records are never all held at once."""

    files: RunDir
    name: str = REQUESTS_JSONL

    def __iter__(self) -> Iterator[RequestRecord]:
        return self.files.stream_records(self.name)


@dataclass(frozen=True)
class RunData:
    """Everything a run directory holds, parsed. ``absent`` names the optional files that were missing.
    ``gpu_metrics`` holds the records of ``gpu_metrics.jsonl`` as written (see :mod:`cardgen.gpu`). ``torn``:
    the files whose torn last line (a write cut short) was left out, and its length in bytes."""

    info: RunInfo
    requests: Iterable[RequestRecord] = field(default_factory=list)  # read as iterated where streamed
    metrics: list[MetricSample] = field(default_factory=list)
    loadgen: list[LoadgenSample] = field(default_factory=list)
    gpu_metrics: list[dict[str, Any]] = field(default_factory=list)
    absent: tuple[str, ...] = ()
    torn: dict[str, int] = field(default_factory=dict)
    # a calibrated run's prediction: the fitted virtual server's requests and /metrics (cardgen.calibrated)
    predicted: list[RequestRecord] = field(default_factory=list)
    predicted_metrics: list[MetricSample] = field(default_factory=list)
    # ``requests`` as rows (cardgen.analysis.requests.request_frame), where the run's writer made them as it wrote
    # them (a build rendering what it computed): the analysis takes them instead of reading the records
    frame: pd.DataFrame | None = None


def load_run(run_dir: Path, *, stream_requests: bool = False,
             scrapes: Sequence[MetricSample] | None = None, frame: pd.DataFrame | None = None) -> RunData:
    """Parse ``run_dir``. Raises :class:`~cardgen.errors.RunFileError` when it is not a run directory (no
    readable run.json), a newer cardgen wrote it, or a file is corrupt; a missing JSON-lines file is reported in
    ``absent``. ``info.status`` is the effective status: a run whose writer was killed reads ``died``, so the
    card says so. ``stream_requests``: the request records are read as they are iterated (:class:`StoredRecords`:
    a corrupt record raises then, and a torn last line is counted in ``torn`` then), not held. ``scrapes``: the
    scrapes of server_metrics.jsonl as its writer held them (a build rendering what it computed), not read again;
    ``frame``: its requests as rows, as its writer made them (the records are then read only by a kind that reads
    them)."""
    rd = RunDir(run_dir)
    info = rd.load_run_info()
    absent = []
    loaded: dict[str, Any] = {}
    for name, model in ((REQUESTS_JSONL, RequestRecord), (SERVER_METRICS_JSONL, MetricSample),
                        (LOADGEN_JSONL, LoadgenSample), (GPU_METRICS_JSONL, None)):
        if (rd.path / name).is_file():
            if name == SERVER_METRICS_JSONL and scrapes is not None:
                loaded[name] = list(scrapes)
                continue
            loaded[name] = StoredRecords(rd, name) if stream_requests and model is RequestRecord else \
                rd.load_jsonl(name, model)
        else:
            absent.append(name)
            loaded[name] = []
    predicted = {name: rd.load_jsonl(name, model) if info.calibration is not None and (rd.path / name).is_file()
                 else [] for name, model in ((PREDICTED_JSONL, RequestRecord), (PREDICTED_METRICS_JSONL, MetricSample))}
    return RunData(info=info, requests=loaded[REQUESTS_JSONL], metrics=loaded[SERVER_METRICS_JSONL],
                   loadgen=loaded[LOADGEN_JSONL], gpu_metrics=loaded[GPU_METRICS_JSONL], absent=tuple(absent),
                   torn=rd.torn, predicted=predicted[PREDICTED_JSONL],
                   predicted_metrics=predicted[PREDICTED_METRICS_JSONL], frame=frame)
