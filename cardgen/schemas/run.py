"""``run.json``: the provenance of a run (what was measured, how, when, by which cardgen), and the version of
the JSON-lines files the load stage writes next to it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from cardgen.buildconfig import BuildConfig
from cardgen.schemas.calibration import CalibrationReport
from cardgen.schemas.saved import Saved
from cardgen.stops import STOP_SKIPPED


class Described(Saved):
    """A description cardgen saves and reads back by field. Fields it does not name (an engine's own, a newer
    cardgen's) are kept and written back as they were read."""

    model_config = ConfigDict(extra="allow")


class LaunchDescription(Described):
    """How cardgen started the engine it measured (run.json ``server.launch``), secrets masked."""

    engine: str | None = None
    engine_version: str | None = None
    command: list[str] = Field(default_factory=list)
    arguments: dict[str, Any] = Field(default_factory=dict)  # the engine's arguments, parsed
    engine_args: list[str] = Field(default_factory=list)  # as given to --engine-args
    env: dict[str, str] = Field(default_factory=dict)  # the engine's environment as recorded (secrets masked)
    host: str | None = None
    port: int | None = None
    url: str | None = None
    pid: int | None = None
    log: str | None = None
    started_unix: float | None = None
    ready_after_s: float | None = None
    server_reported: dict[str, Any] | None = None  # what the engine's log said of its own configuration
    stopped: str | None = None  # how it was stopped

RUN_SCHEMA_VERSION = 1

# which clock timed a run's requests (run.json ``clock``)
REAL, VIRTUAL = "real", "virtual"

# run.json's ``status`` as written by the load stage ...
RUNNING, COMPLETE, INTERRUPTED, FAILED = "running", "complete", "interrupted", "failed"
# ... and as :func:`cardgen.rundir.effective_status` may read a "running" one: its writer is gone (same host),
# or has not been heard of for a while (another host). "died" is written only on request (runwriter.mark_died).
DIED, STALE = "died", "stale"


class ContextLimit(Saved):
    """The most tokens one request may hold (prompt + output), as the server states it, and where it said so.
    A point whose requests cannot fit is not run (run.json ``points[].detail`` says why)."""

    tokens: int
    source: str


class RequestDialect(Saved):
    """The fields beyond the OpenAI API that the run's requests carried, agreed with the server before the load
    (:mod:`cardgen.load.dialect`): the ones that force the output length (``min_tokens``: the target,
    ``ignore_eos``: true), those an ingestion sweep's requests add so that the engine computes the whole prompt
    (llama.cpp's ``cache_prompt: false``), and each field the server refused, with its answer."""

    length_fields: list[str] = Field(default_factory=lambda: ["min_tokens", "ignore_eos"])
    cold_fields: dict[str, Any] = Field(default_factory=dict)
    rejected: dict[str, str] = Field(default_factory=dict)

    @property
    def forces_length(self) -> bool:
        """Whether the requests carried a field that makes the server generate exactly their target."""
        return bool(self.length_fields)


class ServerInfo(Saved):
    """What the server said about itself."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    url: str
    engine: str = "unknown"  # vllm | sglang | tgi | llamacpp | cardgen-sim | openai-compatible | unknown
    engine_version: str | None = None
    served_model: str | None = None  # the model id requests are sent with
    models: Any = None  # /v1/models as returned
    version: Any = None  # /version as returned
    extra: dict[str, Any] = Field(default_factory=dict)  # /info, /props, ... whatever the adapter read
    launch: LaunchDescription | None = None  # command, arguments, version when cardgen started the engine
    tokenizer: str = "unknown"  # how prompts were sized: "server /tokenize (...)" or "usage.prompt_tokens ..."
    context: ContextLimit | None = None  # the most tokens a request may hold, as the server's adapter read it
    dialect: RequestDialect | None = None  # None: a run made before cardgen agreed fields (min_tokens, ignore_eos)
    id_style: str = "plain"  # how request ids were written in prompts (cardgen.prompts.ID_STYLES)
    # what cardgen sent before the load, by purpose: {requests, prompt_tokens, output_tokens, refused} (the records
    # never include these; the server's counters do)
    probes: dict[str, dict[str, int]] = Field(default_factory=dict)

    def context_length(self) -> int | None:
        """The most tokens one request may hold: :attr:`context` as the engine's adapter read it, else the served
        model's ``max_model_len`` in ``/v1/models`` (a run made before ``context`` was recorded)."""
        if self.context is not None:
            return self.context.tokens
        if isinstance(self.models, dict):
            for entry in self.models.get("data") or ():
                if isinstance(entry, dict) and entry.get("id") == self.served_model:
                    value = entry.get("max_model_len")
                    return value if isinstance(value, int) and value > 0 else None
        return None


class PointOutcome(Saved):
    """One point of the run as the load stage ran it (or did not): ``run.json`` ``points``, in suite order.

    A point with ``started_unix`` and no ``ended_unix`` was cut off; one with neither was never reached."""

    name: str
    kind: str
    started_unix: float | None = None
    ended_unix: float | None = None
    requests: int = 0  # records of this point on disk (superseded ones not counted)
    stop: str | None = None  # one of cardgen.stops.STOP_REASONS once the point ended
    detail: str | None = None  # the words behind ``stop``: which figure, which cap, why it was skipped
    saturation: str | None = None  # closed loop: why the point saturated the server (cardgen.saturation)
    attempt: int = 0  # 0 the first time; each ``cardgen resume`` that reruns the point adds one
    # whether the load generator kept up during the point (cardgen.load.workers.client_verdict), and its figures
    client_kept_up: bool | None = None
    client: str | None = None

    @property
    def ended(self) -> bool:
        """Whether the point is over for good: it finished, or was skipped after a saturated one (a resumed run
        never runs it again, whatever a new session would decide)."""
        return self.ended_unix is not None or self.stop == STOP_SKIPPED


def point_attempts(points: list[PointOutcome]) -> dict[str, int]:
    """Each point's current attempt (run.json ``points``)."""
    return {p.name: p.attempt for p in points}


def record_counts(attempts: dict[str, int], scenario: str, attempt: int) -> bool:
    """Whether a record of point ``scenario`` sent by ``attempt`` counts: it was sent by its point's current
    attempt (``attempts``: :func:`point_attempts`); a record of a point run.json does not list counts. Records of
    an earlier, cut-off attempt are superseded: kept on disk, never counted."""
    return attempts.get(scenario, attempt) == attempt


class LoadWorker(Saved):
    """One Locust worker process of the run (run.json ``load_workers``): where it ran, what it sent, its clock
    against the master's (``cardgen.load.clocks``; its stamps in requests.jsonl were shifted by minus
    ``clock_applied_s``), whether it kept up over the run, and, when it was lost mid-run, what became of it."""

    name: str
    session: int = 0  # the load session it served: 0 ``cardgen build``, 1, 2... each ``cardgen resume``
    host: str | None = None  # its host name, as it said
    address: str | None = None  # the address it reached the master from
    requests: int = 0  # records it sent that reached the master (lost ones included)
    lost_requests: int = 0  # of those, recorded by the master as lost with it
    clock_offset_s: float | None = None  # its clock minus the master's, estimated before the load
    clock_uncertainty_s: float | None = None  # the true offset is within offset ± this
    clock_round_trip_s: float | None = None  # the shortest round trip of the exchanges
    clock_applied_s: float = 0.0  # what was taken off its stamps (0: the offset was within its uncertainty)
    kept_up: bool | None = None  # cardgen.load.workers.client_verdict over its own samples and send lags
    client: str | None = None  # the figures behind ``kept_up``
    lost: str | None = None  # why and when the master lost it (None: it stayed to the end of its session)
    cpus_awake: str | None = None  # what ``--low-latency`` came to on its host (cardgen.load.wake; None: not asked)


class SchedulerDescription(Described):
    """The virtual server's scheduler: its KV blocks and its limits per step."""

    policy: str | None = None  # prefill-first | chunked-prefill
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_size_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None


class DriveDescription(Described):
    """How a run in virtual time was timed (``cardgen.sim.drive.DriveOptions``)."""

    network_s: float = 0.0
    read_jitter_s: float = 0.0
    step_jitter: float = 0.0
    seed: int = 0
    processes: int = 1


class SimDescription(Described):
    """What the virtual server modelled (run.json ``sim``): enough to start it again and to say so on the card."""

    engine: str | None = None
    version: str | None = None
    modelled: bool = True
    model: str | None = None
    served_model_name: str | None = None
    gpu: str | None = None  # a preset's name, or the GPU file's path (how to start the server again)
    tp: int = 1
    engine_profile: str | None = None
    perf: dict[str, Any] = Field(default_factory=dict)  # the performance model's own description
    scheduler: SchedulerDescription = Field(default_factory=SchedulerDescription)
    eos_rate: float | None = None
    seed: int | None = None
    faults: str | None = None
    pid: int | None = None  # None: it ran in virtual time, in no process
    started_at: float | None = None
    url: str | None = None
    model_config_path: str | None = Field(default=None, alias="model_config")  # --model-config, resolved
    clock: str | None = None
    drive: DriveDescription | None = None  # virtual time: how the run was timed
    expected_error: dict[str, Any] | None = None  # the calibration's expected error, when recorded

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class GpuDescription(Described):
    """The server's GPUs as run.json records them: the inventory NVML or DCGM gave (``telemetry`` true), the
    reason there is none, or the modelled GPU."""

    name: str | None = None
    name_source: str | None = None  # where the name came from when no telemetry read it: "as given with --gpu"
    count: int | None = None
    modelled: bool = False
    telemetry: bool | None = None
    reason: str | None = None  # why there is no telemetry
    source: str | None = None  # nvml | dcgm
    driver: str | None = None
    cuda_driver: str | None = None
    memory_total_bytes: int | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list)


class LoadgenReport(Described):
    """The load generator measuring itself over the run: event-loop lag, send lag and CPU percentiles."""

    loop_lag_p50_s: float | None = None
    loop_lag_p95_s: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    send_lag_p50_s: float | None = None
    send_lag_p99_s: float | None = None
    cpu_percent_p50: float | None = None
    cpu_percent_max: float | None = None
    samples: int = 0
    # what ``--low-latency`` came to where the load ran in cardgen's own process (cardgen.load.wake; None: not
    # asked, or the load ran in worker processes, each of which says it in ``load_workers``)
    cpus_awake: str | None = None


class PriceDescription(Saved):
    """What one GPU-hour of the run's GPUs costs, and who said so: ``--price-per-hour`` on ``cardgen build`` or
    ``cardgen render``, or the GPU file's ``price_per_hour``. The card's costs per million tokens follow from it."""

    usd_per_gpu_hour: float
    source: str


def _saved_build(value: Any) -> Any:
    return BuildConfig.load_saved(value) if isinstance(value, dict) else value


class RunInfo(Saved):
    """Everything needed to know where the numbers of a run came from."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

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
    status: str = RUNNING  # running | complete | interrupted | failed (| died, once marked)
    # The process writing the run while it is running, so that a reader can tell a run still going from one
    # killed without a chance to say so (kill -9, a power cut): stamped by RunDir.save_run_info.
    pid: int | None = None
    hostname: str | None = None
    heartbeat_unix: float | None = None  # the writer's last save while running; the load stage may refresh it
    server: ServerInfo
    # which clock timed the requests: "real" (the load engine against a server, the virtual one included with
    # --real-time) or "virtual" (the virtual-time driver: the virtual server's own times, no socket). Files written
    # before the field say it in ``sim.clock`` (virtual) or not at all (real): filled in when read
    clock: str | None = None
    modelled: bool = False
    gpu: GpuDescription = Field(default_factory=GpuDescription)  # name, count, driver, memory ...; or the modelled GPU
    sim: SimDescription | None = None  # the virtual server's model, GPU and engine profile when modelled
    workers: int = 0  # Locust worker processes (0: one process)
    workers_choice: str | None = None  # ``--workers auto``: why that many (cardgen.load.workers)
    load_workers: list[LoadWorker] = Field(default_factory=list)  # each worker process, every session's (none:
    # one process)
    requests_total: int = 0
    requests_failed: int = 0
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    length_mismatches: int = 0  # successful requests whose usage.completion_tokens != the forced length
    loadgen: LoadgenReport = Field(default_factory=LoadgenReport)  # loop-lag and send-lag percentiles, CPU
    warnings: list[str] = Field(default_factory=list)
    points: list[PointOutcome] = Field(default_factory=list)  # every point of the suite, in order (may be empty
    # in runs written before cardgen recorded them)
    price: PriceDescription | None = None  # cost figures on the card: USD per GPU-hour
    # a calibrated run (cardgen build --calibrate): ``points`` are the points measured, and this says how every other
    # point of the suite was predicted (cardgen.schemas.calibration)
    calibration: CalibrationReport | None = None
    # how the run was built (cardgen.buildconfig), as read back from the file: no secret, no parsed suite (that
    # is ``suite_spec``). None in a run.json written before cardgen saved it, or made by a test's driver
    build: Annotated[BuildConfig | None, BeforeValidator(_saved_build)] = None

    def ran_saturated(self) -> bool:
        """Whether the run was built with ``--run-saturated``: its saved build config says; a run.json written
        before cardgen saved one, its command line."""
        if self.build is not None:
            return self.build.load.run_saturated
        return "--run-saturated" in self.command

    @model_validator(mode="after")
    def _clock(self) -> RunInfo:
        if self.clock is None:  # validate_assignment: set through __dict__, not validated again
            self.__dict__["clock"] = VIRTUAL if self.sim is not None and self.sim.clock == VIRTUAL else REAL
        return self
