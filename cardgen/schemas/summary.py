"""``summary.json``: the versioned result of analysing one run. The card, the site and the hub read it.

Written by :meth:`cardgen.rundir.RunDir.save_summary`, read by :meth:`~cardgen.rundir.RunDir.load_summary` (which
refuses a newer ``schema_version``; unknown fields are ignored). Names carry units. A figure the
run could not measure is ``None`` (``null``), and ``missing`` says why in words.

Layout (``schema_version`` 4)::

    schema_version, model, served_model, gpu, gpu_count, gpu_driver, engine, engine_version, modelled,
    modelled_by, suite, started_at, ended_at, run_status, cardgen_version,
    prompt_ingestion_tok_s, kv_cache_tokens, kv_cache_method, requests_total, requests_failed,
    superseded_requests
    headline      {prompt_ingestion_tok_s, generation_tok_s_at_10_parallel_1024_128,
                   decode_tok_s_at_10_parallel_1024_128, kv_cache_tokens}
    headline_precision  the 95 % half-widths the headline figures reached, as fractions of each figure
    ingestion     IngestionFit: the robust fit of TTFT against prompt tokens
    generation    GenerationHeadline: the 10-parallel 1024/128 point, medians with intervals
    kv_cache      KVCapacity: every method's estimate, the one chosen, their agreement (a kind's probe keeps
                  what it measured in ``kinds``)
    scenarios     [ScenarioSummary] in suite order (run.json ``points``), points that were not run included;
                  each with ``stop``, ``stop_detail``, its steady state (closed loop) and ``precision``
    gpu_telemetry GpuTelemetry: the GPUs over the measured window (gpu_metrics.jsonl), or why there is none
    server_vs_client  ServerVsClient: the server's own latency histograms and token counters next to the
                  client's figures for the same requests, for the whole run and per closed-loop point
    time_budget   TimeBudgets: each point's mean TTFT split into queue, prompt compute, other server time and
                  network and client, with the engine's decode time per token (where the engine says enough)
    reasoning     whether the model reasoned before answering (each scenario: ttfa_s, reasoning_tokens_mean,
                  answer_tokens_mean, their speeds)
    speculative   SpeculativeDecoding over the run (each scenario: its own, where the counters allow)
    options       the SLOs and thresholds the figures were computed with
    tables, figures   file names written next to summary.json
    missing, warnings
    calibration   a calibrated run's fit, spot checks and predictions (run.json ``calibration``); each scenario's
                  ``basis`` is then ``measured`` or ``predicted``
    kinds         {kind name: its KindResult}: the figures a kind's own analysis makes of its points
                  (older files held some at the top level: :data:`MOVED_TO_KINDS`, read into ``kinds``)
    load_workers  [WorkerPath]: each load worker's TTFT against the other workers' on the same points (a slower
                  path to the server), where two or more worker processes sent the load

Version 3: a closed-loop point's figures come from its steady requests only (ramp and drain left out and
counted), its rates over its steady window; every point says why it stopped and how precise it is; records of
superseded attempts are counted apart; the batch table and the ingestion fit carry the intervals their stopping
rules use.

Version 4: the figures a kind's own analysis makes live under ``kinds``, by the kind's name, each with its own
``version``: the SLO search's ``slo_search`` is ``kinds.slo.searches``, the closed loop's ``capacity`` is
``kinds.closed.capacity``. Files of versions 1 to 3 still load: their top-level keys are read into ``kinds``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from cardgen.schemas.calibration import MEASURED, CalibrationReport, PointPrediction
from cardgen.schemas.saved import Saved

SUMMARY_SCHEMA_VERSION = 4


class Headline(Saved):
    """The three figures a card leads with (None when the run could not measure one)."""

    prompt_ingestion_tok_s: float | None = None
    generation_tok_s_at_10_parallel_1024_128: float | None = None  # median speed from start
    decode_tok_s_at_10_parallel_1024_128: float | None = None  # median decode speed
    kv_cache_tokens: float | None = None
    ttfa_s_at_10_parallel_1024_128: float | None = None  # median time to first answer token (a reasoning model)


class Distribution(Saved):
    """Order statistics of one per-request (or per-chunk) quantity, with a bootstrap 95 % interval on the
    median. Values in the unit of the field that holds it (``ttft_s`` in seconds, ``decode_tok_s`` in tok/s)."""

    n: int = 0
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p50_ci_low: float | None = None
    p50_ci_high: float | None = None


class PointPrecision(Saved):
    """How precisely a point's figures are known: each figure's 95 % interval half-width as a fraction of the
    figure (0.018 is +-1.8 %), by the method its stopping rule uses (:mod:`cardgen.precision`); None where too few
    batches (or rounds, or prompt lengths) were measured for an interval."""

    method: str  # batch means (closed) | slope t interval (ingest) | mean of rounds (batch)
    speed_from_start: float | None = None  # closed: median speed from start (decides, with ttft)
    ttft: float | None = None  # closed: median TTFT
    decode: float | None = None  # closed: median decode speed; batch: the mean over its rounds of each round's mean
    # decode speed per request
    slope: float | None = None  # ingest: the slope of TTFT against prompt tokens (so the ingestion speed)
    batches: int | None = None  # closed: batches of whole rounds; batch: rounds; ingest: points fitted


class SpeculativeDecoding(Saved):
    """Speculative decoding as the server counted it over a window between two scrapes of its ``/metrics`` (the
    run: first to last scrape; a point: the last scrape before its first send to the first after its last end,
    when no other point's request falls in it). ``method`` ``counters``: increases of vLLM's ``spec_decode_*``
    counters (exact); ``gauges``: the mean over the window's scrapes of SGLang's accept-length and accept-rate
    gauges (each the server's own average over its last stats interval)."""

    acceptance_rate: float | None = None  # accepted draft tokens / draft tokens (0..1)
    mean_accepted_tokens: float | None = None  # accepted draft tokens per draft (a sequence's verify step)
    mean_acceptance_length: float | None = None  # 1 + mean_accepted_tokens: tokens a sequence gains per step
    per_position: list[float] = Field(default_factory=list)  # share of drafts whose position i (from 0) was accepted
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    method: str = "counters"  # counters | gauges
    source: str = ""  # the metrics read
    start_unix: float | None = None
    end_unix: float | None = None


class AdapterFigures(Saved):
    """One LoRA adapter's requests within a point (``adapter`` "": the base model's): medians with intervals, as
    the point's own figures are taken (its steady requests, for a closed loop)."""

    adapter: str
    requests: int = 0
    ttft_s: Distribution = Field(default_factory=Distribution)
    tpot_s: Distribution = Field(default_factory=Distribution)
    decode_tok_s: Distribution = Field(default_factory=Distribution)
    output_tok_s: float | None = None  # its share of the point's output throughput: its output tokens / duration


class ScenarioSummary(Saved):
    """One point of the suite (one ``scenario`` name), warm-up and superseded requests left out of every figure.

    A closed-loop point's figures (distributions, throughput, goodput) come from its steady requests
    (:func:`cardgen.precision.steady_mask` over its successful requests); ``requests``, ``failed`` and the failure
    rate count every request it sent. A point that was not run (``stop`` ``skipped``) has no request and no
    figure."""

    scenario: str
    kind: str
    group: str = ""
    endpoint: str = "completions"
    prompt_tokens: int  # the target length
    output_tokens: int  # the target length
    prompt_tokens_mean: float | None = None  # what the server counted (usage)
    output_tokens_mean: float | None = None
    parallel: int | None = None  # its users, or its largest group sent at once (Kind.row_parallel)
    rate_rps: float | None = None  # open loop; None with all_at_once
    all_at_once: bool = False  # open loop at rate inf
    requests: int = 0
    warmup_requests: int = 0
    failed: int = 0
    failure_rate: float = 0.0
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    started_unix: float | None = None  # first send
    ended_unix: float | None = None  # last end
    duration_s: float | None = None  # last end - first send
    req_s: float | None = None  # successful requests / duration
    output_tok_s: float | None = None  # sum of output tokens / duration
    total_tok_s: float | None = None  # sum of prompt + output tokens / duration
    goodput_req_s: float | None = None  # requests meeting every SLO / duration
    goodput_fraction: float | None = None  # requests meeting every SLO / requests
    ttft_s: Distribution = Field(default_factory=Distribution)
    e2e_s: Distribution = Field(default_factory=Distribution)
    tpot_s: Distribution = Field(default_factory=Distribution)
    itl_s: Distribution = Field(default_factory=Distribution)  # pooled gaps between text chunks
    decode_tok_s: Distribution = Field(default_factory=Distribution)
    speed_from_start_tok_s: Distribution = Field(default_factory=Distribution)
    send_lag_s: Distribution | None = None  # scheduled sends only (an arrival process): sent - scheduled
    kv_usage_max: float | None = None  # fraction 0..1, from the server's gauge during the scenario
    kv_usage_mean: float | None = None
    running_max: float | None = None
    waiting_max: float | None = None
    preemptions: float | None = None  # increase of the server's preemption counter
    # closed loop: steady state. True: the figures come from the steady requests; False: the point holds fewer
    # steady requests than one round (its parallel count), too short for a steady state, and its figures keep
    # every request; None: not a closed-loop point
    steady_state: bool | None = None
    steady_requests: int | None = None  # closed: successful requests sent after the first completion and ended
    # before the last send
    ramp_drain_requests: int = 0  # closed: successful requests left out of the figures as ramp or drain
    superseded_requests: int = 0  # records of cut-off attempts of this point: kept on disk, never counted
    # how the point ran (run.json ``points``): why it stopped (cardgen.stops.STOP_REASONS) and in words
    stop: str | None = None
    stop_detail: str | None = None
    saturation: str | None = None  # closed loop: why it saturated the server (cardgen.saturation)
    # whether the load generator kept up while the point ran, and its figures (run.json ``points``)
    client_kept_up: bool | None = None
    client: str | None = None
    target_ci: float | None = None  # the suite's precision target for the point (0.03 is +-3 %)
    precision: PointPrecision | None = None
    # reasoning models (cardgen.analysis.reasoning): time to the answer's first chunk (a request that reasons
    # first: TTFT times its first thinking token), reasoning and answer tokens per request (answer = output -
    # reasoning), their speeds, the requests whose output ended before the answer began, where the counts came from
    ttfa_s: Distribution = Field(default_factory=Distribution)
    reasoning_tokens_mean: float | None = None
    answer_tokens_mean: float | None = None
    reasoning_tok_s: Distribution = Field(default_factory=Distribution)
    answer_tok_s: Distribution = Field(default_factory=Distribution)
    unanswered: int = 0
    reasoning_tokens_source: str | None = None  # usage | tokenize | both, in words
    speculative: SpeculativeDecoding | None = None  # the server's counters over the point, where they allow
    adapters_in_flight: float | None = None  # LoRA: mean distinct adapters among the requests in flight
    per_adapter: list[AdapterFigures] = Field(default_factory=list)
    # with a price (run.json ``price``): the GPUs' cost per million tokens at this point's throughput
    # (price per GPU-hour x GPUs / 3600 / tokens per second x 1e6): output tokens, and prompt + output tokens
    usd_per_million_output_tokens: float | None = None
    usd_per_million_tokens: float | None = None
    replay: bool = False  # open loop: a trace replayed at its own times (no rate)
    # where energy was measured: the GPUs' energy from the point's first send to its last end / the output tokens
    # of its successful requests (ramp and drain included: the GPUs spent it on them too)
    j_per_output_token: float | None = None
    # a calibrated run: "measured", or "predicted" by the fitted virtual server (its figures in the same fields, their
    # p50 intervals the fit's; ``prediction`` adds the throughput's interval and the spot check's errors)
    basis: str = MEASURED
    prediction: PointPrediction | None = None

    @property
    def not_run(self) -> bool:
        """A point of the suite that sent no request because it was skipped (a smaller count saturated)."""
        return self.requests == 0 and self.stop == "skipped"

    @property
    def rate_label(self) -> str:
        """Open loop: ``inf`` for all at once, ``trace`` for a replayed trace, else the rate (``4``, ``0.5``); ``?``
        when not recorded."""
        if self.replay:
            return "trace"
        if self.all_at_once:
            return "inf"
        return f"{self.rate_rps:g}" if self.rate_rps is not None else "?"


class IngestionFit(Saved):
    """TTFT = intercept_s + slope_s_per_token x prompt tokens, fitted robustly over the ingestion sweep."""

    tok_s: float | None = None  # 1 / slope
    tok_s_ci_low: float | None = None  # bootstrap 95 % interval over the points kept
    tok_s_ci_high: float | None = None
    # the slope's 95 % t interval over the points kept (cardgen.precision.slope_interval: the sweep's stopping
    # evidence), as a half-width, as a fraction of the slope, and as ingestion speeds (1 / (slope +- half-width))
    slope_ci_half_width_s_per_token: float | None = None
    slope_ci_relative: float | None = None
    tok_s_slope_ci_low: float | None = None
    tok_s_slope_ci_high: float | None = None
    slope_s_per_token: float
    intercept_s: float
    method: str  # trimmed_ols (points > tolerance off dropped, refit) | theil_sen (too few points kept)
    tolerance: float = 0.05
    n_points: int
    n_used: int
    r2: float | None = None
    prompt_tokens_min: float | None = None
    prompt_tokens_max: float | None = None


class HeadlinePrecision(Saved):
    """The 95 % interval half-width each headline figure reached, as a fraction of the figure (0.018 is
    +-1.8 %); None where the run gives no interval. Ingestion: the slope's t interval; the 10-parallel point: batch
    means over whole rounds of its steady requests; KV cache: half the saturation probe's bracket (the server's
    declared capacity is exact: 0; the usage extrapolation has no interval: None)."""

    prompt_ingestion_tok_s: float | None = None
    generation_tok_s_at_10_parallel_1024_128: float | None = None  # median speed from start
    ttft_s_at_10_parallel_1024_128: float | None = None  # median TTFT (decides the point's stop with the speed)
    decode_tok_s_at_10_parallel_1024_128: float | None = None  # median decode speed
    kv_cache_tokens: float | None = None


class GenerationHeadline(Saved):
    """The 10-parallel, 1024-in / 128-out closed-loop point."""

    scenario: str
    requests: int  # the requests behind the medians (its steady requests when it has a steady state)
    speed_from_start_tok_s: float | None = None  # median
    speed_from_start_ci_low: float | None = None
    speed_from_start_ci_high: float | None = None
    decode_tok_s: float | None = None  # median
    decode_ci_low: float | None = None
    decode_ci_high: float | None = None


class KVEstimate(Saved):
    """One method's answer to "how many tokens fit in the KV cache"."""

    method: str  # server_config | usage_extrapolation | a kind's own (saturation_probe)
    tokens: float | None = None  # None when the method gives only a bound
    low: float | None = None  # spread (usage: p25..p75 over samples; a probe: its bracket)
    high: float | None = None
    lower_bound: float | None = None  # a probe that never saturated the server: capacity is at least this
    samples: int = 0  # metric samples (usage) or a kind's probes the estimate rests on
    source: str = ""  # where the number came from, in words
    vs_chosen_pct: float | None = None  # 100 x (tokens - chosen) / chosen


class KVCapacity(Saved):
    tokens: float | None = None
    method: str | None = None
    lower_bound: float | None = None  # when no method gave a value but one bounds it from below
    block_size: int | None = None
    estimates: list[KVEstimate] = Field(default_factory=list)
    agreement_pct: float | None = None  # largest |vs_chosen_pct| among the other estimates
    # method -> what it says of the figure it gave (a kind's probe: what its lower bound means); files written
    # before the kinds gave their own estimates held the probe's note as ``saturation_note`` (not read)
    notes: dict[str, str] = Field(default_factory=dict)
    not_run: dict[str, str] = Field(default_factory=dict)  # method -> why it could give no figure on this run

    @property
    def bounded_by(self) -> str:
        """What the lower bound means, in the words of the estimate that gave it (a kind's probe: its note), or its
        method's name ('' without a bound)."""
        method = next((e.method for e in self.estimates if e.lower_bound is not None), "")
        return self.notes.get(method) or method


class GpuReading(Saved):
    """One GPU over the measured window."""

    gpu: int | str
    peak_memory_bytes: int | None = None
    mean_utilization_pct: float | None = None
    mean_power_w: float | None = None
    energy_j: float | None = None
    samples: int = 0


class GpuTelemetry(Saved):
    """What the GPUs did while the run was measured, from ``gpu_metrics.jsonl`` (``status`` ``measured``), or
    why nothing is known: ``no_telemetry`` with ``reason`` (run.json ``gpu.reason`` verbatim, or what is
    missing), ``modelled`` (the virtual server models the GPU: no telemetry to read)."""

    status: str = "no_telemetry"  # measured | no_telemetry | modelled
    reason: str | None = None
    source: str | None = None  # nvml | dcgm
    name: str | None = None
    name_source: str | None = None  # where the name came from when no telemetry read it (the user's --gpu)
    count: int | None = None
    driver: str | None = None
    memory_total_bytes: int | None = None  # per GPU, as the inventory says
    window_start_unix: float | None = None  # the measured window: first send to last end of the requests
    window_end_unix: float | None = None
    samples: int = 0  # records (one per GPU per sample) inside the window
    duration_s: float | None = None  # first to last sample inside the window
    peak_memory_bytes: int | None = None  # the highest of any one GPU
    peak_memory_total_bytes: int | None = None  # summed over the GPUs, each at its own peak
    mean_utilization_pct: float | None = None  # over GPUs and samples
    mean_power_w: float | None = None
    energy_j: float | None = None  # all GPUs
    energy_source: str | None = None  # energy counter | power integrated over time
    output_tokens: int | None = None  # successful requests' usage output tokens in the window
    j_per_output_token: float | None = None  # energy_j / output_tokens
    per_gpu: list[GpuReading] = Field(default_factory=list)
    failed_samples: int = 0  # samples inside the window that gave nothing (DCGM scrapes that failed)
    failed_reads: int = 0  # fields a device failed to give (NVML errors other than "not supported")
    failure_kinds: list[str] = Field(default_factory=list)  # the errors' names, e.g. ConnectTimeout
    output_tokens_per_joule: float | None = None  # output_tokens / energy_j
    tokens_per_joule: float | None = None  # (prompt + output tokens of the same requests) / energy_j


class LatencyCheck(Saved):
    """One latency as the server's histogram says it (mean = sum / count increase, p50/p90 interpolated inside
    the histogram's buckets) and as the client measured it (exact), with the difference client - server."""

    metric: str  # ttft | itl | e2e | queue
    server_metric: str | None = None  # the histogram's name; None when the server has none
    server_count: float | None = None
    server_mean_s: float | None = None
    server_p50_s: float | None = None
    server_p90_s: float | None = None
    server_p50_bucket_s: list[float | None] | None = None  # [lower, upper] bound of the bucket p50 fell in
    server_p90_bucket_s: list[float | None] | None = None  # (upper None: above the last finite bound)
    client_count: int = 0  # requests (ttft, e2e) or token gaps, sum of (output tokens - 1) (itl)
    client_mean_s: float | None = None
    client_p50_s: float | None = None
    client_p90_s: float | None = None
    diff_mean_s: float | None = None  # client - server: what the network and the client add
    diff_p50_s: float | None = None
    diff_p90_s: float | None = None
    note: str | None = None


class TokenCheck(Saved):
    """Tokens the client's records count (sum of ``usage`` over successful requests) against the increase of the
    server's counter over the same window."""

    tokens: str  # prompt | output
    client_tokens: int = 0
    server_counter: str | None = None
    server_tokens: float | None = None
    diff: float | None = None  # client - server
    approximate: bool = False  # requests only partly inside the window: their output tokens counted as chunks


class CrossCheckWindow(Saved):
    """The comparison over one window: between two scrapes of the server's ``/metrics``."""

    scope: str  # "run" (first to last scrape) or a closed-loop point's scenario name
    start_unix: float
    end_unix: float
    requests: int = 0  # successful requests that ended inside the window
    requests_failed: int = 0  # failed requests that ended inside the window
    straddling: int = 0  # requests only partly inside the window (sent before its start or ended after its end)
    latencies: list[LatencyCheck] = Field(default_factory=list)
    tokens: list[TokenCheck] = Field(default_factory=list)


class ServerVsClient(Saved):
    """The server's own view of the run next to the client's. ``available`` is False, with ``reason``, when the
    server publishes no latency histogram or token counter, or there are fewer than two scrapes."""

    available: bool = False
    reason: str | None = None
    run: CrossCheckWindow | None = None
    points: list[CrossCheckWindow] = Field(default_factory=list)


class TimePart(Saved):
    """One part of the client's mean time to first token (:mod:`cardgen.analysis.timebudget`), in seconds and as a
    share of it; ``source`` says what it was read from."""

    part: str  # queue | prompt | other_server | network_client | outside_engine
    seconds: float | None = None
    share: float | None = None  # of the client's mean TTFT
    source: str = ""


class TimeBudget(Saved):
    """Where one point's (or the run's) time went: the client's mean TTFT split into the engine's own parts, and
    the engine's decode time per token beside the client's ITL and TPOT."""

    scope: str  # "run" or a point's scenario name
    requests: int = 0
    client_ttft_s: float | None = None
    engine_ttft_s: float | None = None  # the engine's own TTFT, from receiving the request (None: it does not say)
    parts: list[TimePart] = Field(default_factory=list)
    engine_decode_per_token_s: float | None = None
    client_itl_s: float | None = None  # Σ (E2E - TTFT) / Σ (output tokens - 1)
    client_tpot_s: float | None = None  # mean of each request's (E2E - TTFT) / (output tokens - 1)
    engine_prompt_tok_s: float | None = None  # prompt tokens the engine computed / its prompt compute
    engine_prompt_method: str | None = None  # how engine_prompt_tok_s was read, in words
    # a part other than prompt compute that takes most of the TTFT, and is a finding: not one the point's kind
    # makes large on purpose (Kind.by_design)
    dominant: str | None = None
    hint: str | None = None  # the engine setting that usually causes it, where the adapter knows one
    by_design: str | None = None  # a part that takes most of the TTFT because the point's kind makes it large

    def part(self, name: str) -> TimePart | None:
        return next((p for p in self.parts if p.part == name), None)


class TimeBudgets(Saved):
    """Where the time goes, per point and over the run, wherever the engine says enough (its per-request account,
    or its queue / prefill / TTFT histograms); else ``reason`` says what it lacks."""

    available: bool = False
    reason: str | None = None
    sources: list[str] = Field(default_factory=list)  # what the parts were read from, in words
    run: TimeBudget | None = None
    points: list[TimeBudget] = Field(default_factory=list)

    def of(self, scope: str) -> TimeBudget | None:
        return next((b for b in self.points if b.scope == scope), None)


class ReplayWindow(Saved):
    """One time slice of a replayed trace (by when requests were sent; tokens by when their chunks arrived)."""

    start_s: float  # seconds after the replay's first send
    end_s: float
    sent: int = 0  # requests sent in the window
    arrival_rps: float | None = None  # sent / width
    output_tok_s: float | None = None  # output tokens whose chunks arrived in the window / width
    ttft_p50_s: float | None = None  # of the successful requests sent in the window
    ttft_p99_s: float | None = None
    slo_attainment: float | None = None  # of the requests sent in the window, the share that met every SLO
    send_lag_max_s: float | None = None
    kv_usage_mean: float | None = None  # the server's gauges over the window
    kv_usage_max: float | None = None
    waiting_max: float | None = None


class ReplayResult(Saved):
    """A trace replayed at its own offsets (suite ``kind: open``, a trace as its ``dataset``, no ``rates``)."""

    scenario: str
    group: str = ""
    dataset: str  # the trace's name
    speedup: float = 1.0
    requests: int = 0
    failed: int = 0
    duration_s: float | None = None  # first send to last end
    trace_span_s: float | None = None  # first to last scheduled send: the trace's own span / speedup
    send_lag_s: Distribution = Field(default_factory=Distribution)  # actual send - the trace's offset
    late_sends: int = 0  # sends more than LATE_S after their offset
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_attainment: float | None = None  # requests that met every SLO / requests (failed ones did not)
    output_tok_s: float | None = None
    prefix_cache_hit_rate: float | None = None  # the server's hits / queries over the replay, when it counts them
    window_s: float | None = None
    windows: list[ReplayWindow] = Field(default_factory=list)


class WorkerPath(Saved):
    """One load worker's path to the server against the other workers' (cardgen.analysis.workers)."""

    worker: str
    requests: int = 0  # records it sent (failed ones included)
    compared: int = 0  # its successful requests on points where another worker had one
    ttft_excess_s: float | None = None  # median of (its TTFT - the quickest other worker's median TTFT, same point)
    ttft_excess_ci_low: float | None = None
    ttft_excess_ci_high: float | None = None
    others_ttft_s: float | None = None  # that reference TTFT's median over the requests compared
    slower_bar_s: float | None = None  # what the interval must lie above for it to be slower
    slower: bool = False


class KindResult(Saved):
    """A kind's own result (``Summary.kinds[name]``: what its analysis made of its points; each kind subclasses
    it). ``version`` is the kind's own: a kind that changes its result's meaning bumps it, and its section reads
    older versions or says it cannot."""

    version: int = 1


# top-level keys of summary.json files written before a kind kept its own result (schema_version 3 and older; a
# version 3 file may hold either layout): key -> the kind's name in ``kinds`` and the field of its result (version
# 1) that held the value
MOVED_TO_KINDS = {"slo_search": ("slo", "searches"), "capacity": ("closed", "capacity")}


class Summary(Saved):
    schema_version: int = SUMMARY_SCHEMA_VERSION
    model: str
    served_model: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    gpu_driver: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    modelled: bool = False
    modelled_by: str | None = None  # the virtual server's GPU and engine profile, in words
    clock: str = "real"  # which clock timed the requests: real (the load engine) or virtual (the virtual-time driver)
    suite: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    run_status: str | None = None
    cardgen_version: str | None = None  # the cardgen that measured the run
    prompt_ingestion_tok_s: float | None = None
    kv_cache_tokens: float | None = None
    kv_cache_method: str | None = None
    requests_total: int = 0
    requests_failed: int = 0
    superseded_requests: int = 0  # records of cut-off attempts a resumed run reran: kept on disk, never counted
    headline: Headline = Field(default_factory=Headline)
    headline_precision: HeadlinePrecision = Field(default_factory=HeadlinePrecision)
    ingestion: IngestionFit | None = None
    generation: GenerationHeadline | None = None
    kv_cache: KVCapacity = Field(default_factory=KVCapacity)
    scenarios: list[ScenarioSummary] = Field(default_factory=list)
    gpu_telemetry: GpuTelemetry = Field(default_factory=GpuTelemetry)
    server_vs_client: ServerVsClient = Field(default_factory=ServerVsClient)
    time_budget: TimeBudgets = Field(default_factory=TimeBudgets)
    options: dict[str, Any] = Field(default_factory=dict)
    tables: list[str] = Field(default_factory=list)
    figures: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)  # what the run lacked, in words
    warnings: list[str] = Field(default_factory=list)
    reasoning: bool = False  # the model reasoned before it answered (some request streamed reasoning)
    speculative: SpeculativeDecoding | None = None  # over the whole run, when the server counts drafts
    price_per_gpu_hour: float | None = None  # USD, as run.json ``price`` says (None: no cost figures)
    price_source: str | None = None
    replays: list[ReplayResult] = Field(default_factory=list)  # one per replayed trace
    calibration: CalibrationReport | None = None  # a calibrated run: run.json's account of the fit and its checks
    # each kind's own result, by the kind's name (cardgen.analysis.kindparts): a KindResult's fields as JSON, read
    # back by the kind's section with its own result type
    kinds: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # each load worker's path to the server against the others' (two or more worker processes; cardgen.analysis.workers)
    load_workers: list[WorkerPath] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _kinds_of_older_files(cls, data: Any) -> Any:
        """A file written before a kind kept its own result holds it under a top-level key: read it into
        ``kinds`` (:data:`MOVED_TO_KINDS`), where its section finds it. A result in ``kinds`` wins."""
        if not isinstance(data, dict) or not any(key in data for key in MOVED_TO_KINDS):
            return data
        data = dict(data)
        kinds = dict(data.get("kinds") or {})
        for key, (name, field) in MOVED_TO_KINDS.items():
            old = data.pop(key, None)
            if old and name not in kinds:
                kinds[name] = {"version": 1, field: old}
        data["kinds"] = kinds
        return data

    def to_json(self) -> str:
        """The file's text: stable key order, two-space indent, NaN and inf written as null."""
        return self.model_dump_json(indent=2) + "\n"
