"""``run.json``: the provenance of a run (what was measured, how, when, by which cardgen)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cardgen.redact import SECRET_FLAGS, redact_argv  # noqa: F401  (re-exported)

RUN_SCHEMA_VERSION = 1

class ServerInfo(BaseModel):
    """What the server said about itself."""

    model_config = ConfigDict(extra="ignore")

    url: str
    engine: str = "unknown"  # vllm | sglang | tgi | llamacpp | cardgen-sim | openai-compatible | unknown
    engine_version: str | None = None
    served_model: str | None = None  # the model id requests are sent with
    models: Any = None  # /v1/models as returned
    version: Any = None  # /version as returned
    extra: dict[str, Any] = Field(default_factory=dict)  # /info, /props, ... whatever the adapter read
    launch: dict[str, Any] | None = None  # command, arguments, version when cardgen started the engine
    tokenizer: str = "unknown"  # how prompts were sized: "server /tokenize" or "usage calibration"


class RunInfo(BaseModel):
    """Everything needed to know where the numbers of a run came from."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = RUN_SCHEMA_VERSION
    cardgen_version: str
    command: list[str]
    model: str
    suite: str
    suite_spec: dict[str, Any] = Field(default_factory=dict)
    started_at: str  # ISO 8601 UTC
    ended_at: str | None = None
    started_unix: float
    ended_unix: float | None = None
    status: str = "running"  # running | complete | interrupted | failed
    server: ServerInfo
    modelled: bool = False
    gpu: dict[str, Any] = Field(default_factory=dict)  # name, count, driver, memory ...; or the modelled GPU
    sim: dict[str, Any] | None = None  # the virtual server's model, GPU and engine profile when modelled
    workers: int = 0
    requests_total: int = 0
    requests_failed: int = 0
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    length_mismatches: int = 0  # successful requests whose usage.completion_tokens != the forced length
    loadgen: dict[str, Any] = Field(default_factory=dict)  # loop-lag and send-lag percentiles, CPU, warnings
    warnings: list[str] = Field(default_factory=list)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_run_info(run_dir: Path, info: RunInfo) -> None:
    from cardgen.rundir import RUN_JSON

    write_json_atomic(Path(run_dir) / RUN_JSON, info.model_dump(mode="json"))


def load_run_info(run_dir: Path) -> RunInfo:
    from cardgen.rundir import RUN_JSON

    return RunInfo.model_validate_json((Path(run_dir) / RUN_JSON).read_text("utf-8"))
