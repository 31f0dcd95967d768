"""Reading a run directory (the only I/O of the analysis): ``run.json`` and the JSON-lines files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cardgen.errors import RenderError
from cardgen.gpu import read_gpu_metrics
from cardgen.records import LoadgenSample, MetricSample, RequestRecord, read_jsonl
from cardgen.rundir import GPU_METRICS_JSONL, LOADGEN_JSONL, REQUESTS_JSONL, RUN_JSON, SERVER_METRICS_JSONL
from cardgen.runinfo import RunInfo


@dataclass(frozen=True)
class RunData:
    """Everything a run directory holds, parsed. ``absent`` names the optional files that were missing.
    ``gpu_metrics`` holds the records of ``gpu_metrics.jsonl`` as written (see :mod:`cardgen.gpu`)."""

    info: RunInfo
    requests: list[RequestRecord] = field(default_factory=list)
    metrics: list[MetricSample] = field(default_factory=list)
    loadgen: list[LoadgenSample] = field(default_factory=list)
    gpu_metrics: list[dict[str, Any]] = field(default_factory=list)
    absent: tuple[str, ...] = ()


def _first_bad_line(path: Path) -> int:
    for number, line in enumerate(path.read_text("utf-8").split("\n"), start=1):
        try:
            if line.strip():
                json.loads(line)
        except json.JSONDecodeError:
            return number
    return 0


def _read(path: Path, model: type) -> list:
    try:
        return list(read_jsonl(path, model))
    except json.JSONDecodeError as exc:
        raise RenderError(f"{path} line {_first_bad_line(path)}: not valid JSON ({exc.msg})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RenderError(f"{path}: a record does not fit the schema ({where}: {first['msg']})") from None
    except OSError as exc:
        raise RenderError(f"cannot read {path}: {exc.strerror or exc}") from None


def load_run(run_dir: Path) -> RunData:
    """Parse ``run_dir``. Raises :class:`RenderError` when it is not a run directory (no readable run.json) or
    a file is corrupt; a missing ``requests.jsonl`` or ``server_metrics.jsonl`` is reported in ``absent``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RenderError(f"run directory {run_dir} does not exist")
    run_json = run_dir / RUN_JSON
    if not run_json.is_file():
        raise RenderError(f"{run_dir} has no {RUN_JSON}: not a cardgen run directory")
    try:
        info = RunInfo.model_validate_json(run_json.read_text("utf-8"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise RenderError(f"{run_json}: {where}: {first['msg']}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RenderError(f"cannot read {run_json}: {exc}") from None
    absent = []
    loaded: dict[str, list] = {}
    for name, model in ((REQUESTS_JSONL, RequestRecord), (SERVER_METRICS_JSONL, MetricSample),
                        (LOADGEN_JSONL, LoadgenSample)):
        path = run_dir / name
        if path.is_file():
            loaded[name] = _read(path, model)
        else:
            absent.append(name)
            loaded[name] = []
    gpu_path = run_dir / GPU_METRICS_JSONL
    if not gpu_path.is_file():
        absent.append(GPU_METRICS_JSONL)
    try:
        gpu = read_gpu_metrics(run_dir)
    except json.JSONDecodeError as exc:
        raise RenderError(f"{gpu_path} line {_first_bad_line(gpu_path)}: not valid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RenderError(f"cannot read {gpu_path}: {exc}") from None
    return RunData(info=info, requests=loaded[REQUESTS_JSONL], metrics=loaded[SERVER_METRICS_JSONL],
                   loadgen=loaded[LOADGEN_JSONL], gpu_metrics=gpu, absent=tuple(absent))
